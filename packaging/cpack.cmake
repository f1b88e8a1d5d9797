# Install rules for the man page and shell completions, and the CPack settings
# for the Debian package. Included at the end of the top-level CMakeLists.txt,
# after src/ has declared install(TARGETS rlock RUNTIME DESTINATION bin).
#
# Build the package from the build directory:
#   cmake -S . -B build && cmake --build build -j2
#   cd build && cpack -G DEB            # -> rlock_<version>_<arch>.deb
# or, to keep the build directory clean:
#   cd build && cpack -G DEB -B /tmp/rlock-pkg

include(GNUInstallDirs)

# --- Man page -----------------------------------------------------------------
# Debian ships man pages gzip-compressed. -n leaves out the name and time stamp
# so that the same source always gives the same bytes (reproducible builds).
find_program(RLOCK_GZIP gzip REQUIRED)
set(RLOCK_MAN_SOURCE ${PROJECT_SOURCE_DIR}/man/rlock.1)
set(RLOCK_MAN_GZ ${PROJECT_BINARY_DIR}/man/rlock.1.gz)
add_custom_command(
  OUTPUT ${RLOCK_MAN_GZ}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
  COMMAND ${CMAKE_COMMAND} -E copy ${RLOCK_MAN_SOURCE} ${PROJECT_BINARY_DIR}/man/rlock.1
  COMMAND ${RLOCK_GZIP} -9 -n -f ${PROJECT_BINARY_DIR}/man/rlock.1
  DEPENDS ${RLOCK_MAN_SOURCE}
  COMMENT "Compressing man page rlock.1"
  VERBATIM)
add_custom_target(rlock_manpage ALL DEPENDS ${RLOCK_MAN_GZ})
install(FILES ${RLOCK_MAN_GZ} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# --- Shell completions ------------------------------------------------------
# The directories each shell searches by default on Debian (and most distros).
install(FILES ${PROJECT_SOURCE_DIR}/completions/rlock.bash
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME rlock)
install(FILES ${PROJECT_SOURCE_DIR}/completions/_rlock
  DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)
install(FILES ${PROJECT_SOURCE_DIR}/completions/rlock.fish
  DESTINATION ${CMAKE_INSTALL_DATADIR}/fish/vendor_completions.d)

# --- CPack --------------------------------------------------------------------
set(RLOCK_PACKAGE_MAINTAINER "rlock maintainers <rlock@localhost>"
  CACHE STRING "Maintainer field of the Debian package: Name <email>")

# Write the values below into CPackConfig.cmake exactly as given here.
set(CPACK_VERBATIM_VARIABLES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rlock)
set(CPACK_PACKAGE_VENDOR "rlock")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${RLOCK_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed lock for shell scripts, kept in Redis")
set(CPACK_PACKAGE_DESCRIPTION
"rlock gives shell scripts, cron jobs and CI pipelines a mutual-exclusion lock
that holds across machines. The lock lives in Redis: `rlock run KEY -- CMD`
takes KEY, runs CMD while renewing the lease, and releases KEY when CMD exits.
Every lock has a TTL, so a crashed holder never blocks the others for good,
and every acquisition gets a strictly increasing fencing token.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
  OWNER_READ OWNER_WRITE OWNER_EXECUTE
  GROUP_READ GROUP_EXECUTE
  WORLD_READ WORLD_EXECUTE)

# Debian specifics. DEB-DEFAULT names the file rlock_<version>_<arch>.deb.
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${RLOCK_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends is computed by dpkg-shlibdeps (package dpkg-dev) from the binary.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libssl3 is loaded with dlopen for rediss:// only, so dpkg-shlibdeps cannot see it.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "redis-tools, libssl3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS redis-server)
# Fixed file ownership (root:root) and permissions inside the archive.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# `make package_source` / `cpack --config CPackSourceConfig.cmake`
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\.git/" "/build[^/]*/" "/\\.cache/" "~$")

include(CPack)
