# Install rules: libkjit.so, the C headers, kjit-cli, kjitConfig.cmake (+ version) and kjit.pc.
include(CMakePackageConfigHelpers)

install(TARGETS kjit EXPORT kjitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES include/kjit/kjit.h include/kjit/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kjit)
if(TARGET kjit-cli)
  install(TARGETS kjit-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(_cfg_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kjit)
install(EXPORT kjitTargets NAMESPACE kjit:: DESTINATION ${_cfg_dir})
configure_package_config_file(cmake/kjitConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/kjitConfig.cmake" INSTALL_DESTINATION ${_cfg_dir})
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/kjitConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/kjitConfig.cmake"
              "${CMAKE_CURRENT_BINARY_DIR}/kjitConfigVersion.cmake"
  DESTINATION ${_cfg_dir})

# kjit.pc's prefix from its own folder (${pcfiledir}: <prefix>/<libdir>/pkgconfig), so the file is
# right wherever the tree is installed; an absolute libdir keeps the absolute prefix.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(KJIT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  set(KJIT_PC_PREFIX "\${pcfiledir}/..")
  string(REGEX MATCHALL "[^/]+" _libdir_parts "${CMAKE_INSTALL_LIBDIR}")
  foreach(_part IN LISTS _libdir_parts)
    string(APPEND KJIT_PC_PREFIX "/..")
  endforeach()
endif()
configure_file(cmake/kjit.pc.in "${CMAKE_CURRENT_BINARY_DIR}/kjit.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/kjit.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
