# Defines commux::ucx, COMMUX_UCX_LIB_DIR and COMMUX_UCX_INSTALL_RPATH.
#   wheel:  the libucx-cu13/-cu12 PyPI wheel in the Python environment (default).
#   system: UCX_ROOT (a UCX install prefix), else pkg-config `ucx`.
if(COMMUX_UCX_PROVIDER STREQUAL "wheel")
  execute_process(
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/ucx_info.py
    OUTPUT_VARIABLE _ucx_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "commux: the UCX wheel is not installed (pip install libucx-cu13 or libucx-cu12), "
                        "or configure with -DCOMMUX_UCX_PROVIDER=system")
  endif()
  find_package(ucx CONFIG REQUIRED PATHS ${_ucx_prefix}/lib/cmake/ucx NO_DEFAULT_PATH)
  set(COMMUX_UCX_LIB_DIR ${_ucx_prefix}/lib)
  set(COMMUX_UCX_INSTALL_RPATH "$ORIGIN/../../libucx/lib")
  add_library(commux::ucx INTERFACE IMPORTED)
  set_target_properties(commux::ucx PROPERTIES INTERFACE_LINK_LIBRARIES "ucx::ucp;ucx::uct;ucx::ucs")
elseif(COMMUX_UCX_PROVIDER STREQUAL "system")
  if(DEFINED ENV{UCX_ROOT} AND NOT UCX_ROOT)
    set(UCX_ROOT $ENV{UCX_ROOT})
  endif()
  if(UCX_ROOT)
    find_path(_ucx_inc ucp/api/ucp.h PATHS ${UCX_ROOT}/include NO_DEFAULT_PATH REQUIRED)
    find_library(_ucx_ucp ucp PATHS ${UCX_ROOT}/lib ${UCX_ROOT}/lib64 NO_DEFAULT_PATH REQUIRED)
    find_library(_ucx_ucs ucs PATHS ${UCX_ROOT}/lib ${UCX_ROOT}/lib64 NO_DEFAULT_PATH REQUIRED)
    get_filename_component(COMMUX_UCX_LIB_DIR ${_ucx_ucp} DIRECTORY)
    add_library(commux::ucx INTERFACE IMPORTED)
    set_target_properties(commux::ucx PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES ${_ucx_inc}
      INTERFACE_LINK_LIBRARIES "${_ucx_ucp};${_ucx_ucs}")
  else()
    find_package(PkgConfig REQUIRED)
    pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
    set(COMMUX_UCX_LIB_DIR ${UCX_LIBDIR})
    add_library(commux::ucx INTERFACE IMPORTED)
    set_target_properties(commux::ucx PROPERTIES INTERFACE_LINK_LIBRARIES PkgConfig::UCX)
  endif()
  set(COMMUX_UCX_INSTALL_RPATH "${COMMUX_UCX_LIB_DIR}")
else()
  message(FATAL_ERROR "COMMUX_UCX_PROVIDER must be 'wheel' or 'system'")
endif()
message(STATUS "commux: UCX (${COMMUX_UCX_PROVIDER}) from ${COMMUX_UCX_LIB_DIR}")
