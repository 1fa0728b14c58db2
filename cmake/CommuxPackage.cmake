# Installs libcommux, its headers and the CMake package that find_package(commux) reads:
# lib/cmake/commux/commuxConfig.cmake (+ version file and exported targets), in a plain
# `cmake --install` prefix and in the wheel (site-packages/commux, whose path
# `python3 -m commux.info --cmake-prefix` prints).
# The torch-free core and its C API (libcommux_core, commux::core) ship beside it, with the
# pkg-config file that C, Fortran and Cargo builds read (lib/pkgconfig/commux.pc).
include(CMakePackageConfigHelpers)
install(TARGETS commux commux_core EXPORT commuxTargets LIBRARY DESTINATION lib
        INCLUDES DESTINATION include)
if(NOT SKBUILD)
  set_property(TARGET commux_core APPEND PROPERTY INSTALL_RPATH "${COMMUX_UCX_LIB_DIR}")
endif()
set(_commux_pc_up "../..")
set(CMAKE_INSTALL_LIBDIR lib)
configure_file(cmake/commux.pc.in ${CMAKE_CURRENT_BINARY_DIR}/core/commux.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/core/commux.pc DESTINATION lib/pkgconfig)
install(DIRECTORY include/commux DESTINATION include)
install(EXPORT commuxTargets NAMESPACE commux:: DESTINATION lib/cmake/commux)
set(COMMUX_CONFIG_CUDA ${_commux_cuda})
configure_package_config_file(cmake/commuxConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/commuxConfig.cmake INSTALL_DESTINATION lib/cmake/commux)
# torch's C++ ABI changes with every release and commux's headers include torch's, so a
# consumer is held to the same commux minor release (and, in the config, the same torch).
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/commuxConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/commuxConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/commuxConfigVersion.cmake
        DESTINATION lib/cmake/commux)
