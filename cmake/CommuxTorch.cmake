# Defines the imported target commux::torch from the torch installed in Python3_EXECUTABLE.
execute_process(
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/torch_info.py
  OUTPUT_VARIABLE _torch_info ERROR_QUIET RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "commux: cannot import torch from ${Python3_EXECUTABLE}; install torch>=2.5 first")
endif()
string(REPLACE "\n" ";" _torch_lines "${_torch_info}")
foreach(_line IN LISTS _torch_lines)
  if(_line MATCHES "^([a-z_0-9]+)=(.*)$")
    set(_torch_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endif()
endforeach()
# include_dirs is itself a ;-list, re-read it whole.
string(REGEX MATCH "include_dirs=([^\n]*)" _m "${_torch_info}")
set(_torch_include_dirs "${CMAKE_MATCH_1}")

string(REGEX MATCH "pybind11_defines=([^\n]*)" _m "${_torch_info}")
set(COMMUX_TORCH_PYBIND11_DEFINES "${CMAKE_MATCH_1}")
set(COMMUX_TORCH_VERSION ${_torch_version})
set(COMMUX_TORCH_LIB_DIR ${_torch_lib_dir})
set(COMMUX_TORCH_CUDA "${_torch_cuda}")
get_filename_component(COMMUX_TORCH_DIR "${COMMUX_TORCH_LIB_DIR}" DIRECTORY)
set(COMMUX_TORCH_CXX11_ABI ${_torch_cxx11_abi})
# torch >= 2.10 headers need C++20; older ones build with C++17. Consumers of commux's
# headers include torch's, so this is part of commux::commux's usage requirements.
if(COMMUX_TORCH_VERSION VERSION_GREATER_EQUAL 2.10)
  set(COMMUX_CXX_STANDARD 20)
else()
  set(COMMUX_CXX_STANDARD 17)
endif()
if(COMMUX_TORCH_CUDA)
  set(COMMUX_TORCH_HAS_CUDA ON)
else()
  set(COMMUX_TORCH_HAS_CUDA OFF)
endif()
# Backend virtuals newer torch declares (supported: 2.5 and later), found in its header so
# that the overrides build against every version in between.
set(_commux_torch_features "")
foreach(_dir IN LISTS _torch_include_dirs)
  set(_backend_hpp "${_dir}/torch/csrc/distributed/c10d/Backend.hpp")
  if(EXISTS "${_backend_hpp}")
    file(READ "${_backend_hpp}" _backend_text)
    # Each feature: the macro commux defines, then what the header declares for it.
    foreach(_feature IN ITEMS
        "SHRINK|supportsShrinking"
        "GATHER_SINGLE|gather_single\\("
        "IS_INITIALIZED|bool isInitialized\\("
        "COMPLETION_HOOKS|registerCompletionHook"
        "EPHEMERAL_TIMEOUT|addEphemeralTimeout"
        "EAGER_CONNECT|eagerConnectSingleDevice"
        "MERGE|intrusive_ptr<Backend> merge\\("
        "TIME_ESTIMATION|supportsTimeEstimation")
      string(REPLACE "|" ";" _pair "${_feature}")
      list(GET _pair 0 _macro)
      list(GET _pair 1 _declared)
      if(_backend_text MATCHES "${_declared}")
        list(APPEND _commux_torch_features COMMUX_TORCH_HAS_${_macro})
      endif()
    endforeach()
    break()
  endif()
endforeach()
message(STATUS "commux: torch ${COMMUX_TORCH_VERSION} (CUDA '${COMMUX_TORCH_CUDA}', cxx11 abi ${_torch_cxx11_abi}) at ${COMMUX_TORCH_LIB_DIR}")

# GLOBAL: a parent project (FetchContent) links commux::commux, which needs it.
add_library(commux::torch INTERFACE IMPORTED GLOBAL)
set_target_properties(commux::torch PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_torch_include_dirs}"
  INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${_torch_cxx11_abi};${_commux_torch_features}"
  INTERFACE_LINK_LIBRARIES
    "${COMMUX_TORCH_LIB_DIR}/libtorch.so;${COMMUX_TORCH_LIB_DIR}/libtorch_cpu.so;${COMMUX_TORCH_LIB_DIR}/libc10.so")
