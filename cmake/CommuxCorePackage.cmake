# Installs libcommux_core (the core and its C API, no torch), its header, a pkg-config file
# (lib/pkgconfig/commux.pc: Make, Cargo build scripts, Fortran) and the CMake package that
# find_package(commux) reads, whose target is commux::core.
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)
# A versioned library (libcommux_core.so.0 and its links) in a system-style install; the
# wheel has no symbolic links, so its copy stays unversioned (CommuxPackage.cmake).
set_target_properties(commux_core PROPERTIES VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR})
install(TARGETS commux_core EXPORT commuxCoreTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} INCLUDES DESTINATION include)
install(FILES include/commux/commux.h include/commux/commux.hpp DESTINATION include/commux)
install(EXPORT commuxCoreTargets NAMESPACE commux:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/commux)
configure_package_config_file(cmake/commuxCoreConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/core/commuxConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/commux)
# The C API keeps its calls within a major version.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/core/commuxConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/core/commuxConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/core/commuxConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/commux)
# pkg-config's file: the prefix is computed from the file's own place, so the install may
# be moved.
file(RELATIVE_PATH _commux_pc_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
configure_file(cmake/commux.pc.in ${CMAKE_CURRENT_BINARY_DIR}/core/commux.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/core/commux.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
