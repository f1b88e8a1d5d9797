# Install rules for the man pages and shell completions, the CPack settings for the
# Debian and RPM packages, and the source tarball. Included at the end of the
# top-level CMakeLists.txt, after src/ has declared
# install(TARGETS rlock RUNTIME DESTINATION bin).
#
# Build the packages from the build directory:
#   cmake -S . -B build && cmake --build build -j2
#   cd build && cpack -G DEB            # -> rlock_<version>_<arch>.deb
#   cd build && cpack -G RPM            # -> rlock-<version>-1.<arch>.rpm (needs rpmbuild:
#                                       #    Debian package rpm)
# or, to keep the build directory clean:
#   cd build && cpack -G DEB -B /tmp/rlock-pkg
# Both carry the same files: /usr/bin/rlock, the man pages rlock(1) and rlock(7) and three
# completions.
#
# Source tarball, reproducible (the same tracked files give the same bytes):
#   make -C build package_source        # -> build/rlock-<version>.tar.gz

include(GNUInstallDirs)

# --- Man pages ----------------------------------------------------------------
# rlock(1), the reference, and rlock(7), the guarantees, data layout and notes, are written in
# scdoc (man/*.scd; Debian package scdoc) and turned into roff here: build/man/rlock.1 and
# build/man/rlock.7. They are dated SOURCE_DATE_EPOCH when it is set, else a fixed date, never
# the time of the build. Debian ships man pages gzip-compressed; -n leaves out the name and time
# stamp: the same source always gives the same bytes (reproducible builds).
find_program(RLOCK_SCDOC scdoc REQUIRED)
find_program(RLOCK_GZIP gzip REQUIRED)
find_program(RLOCK_SH sh REQUIRED)
if(DEFINED ENV{SOURCE_DATE_EPOCH})
  set(RLOCK_MAN_EPOCH $ENV{SOURCE_DATE_EPOCH})
else()
  set(RLOCK_MAN_EPOCH 1795392000)  # 2026-11-23
endif()
set(RLOCK_MAN_PAGES)
# rlock(7)'s ACL SETUSER lines come from the list that the permission error also gives.
set(RLOCK_ACL ${PROJECT_SOURCE_DIR}/src/redis/acl.txt)
foreach(section 1 7)
  set(source ${PROJECT_SOURCE_DIR}/man/rlock.${section}.scd)
  set(page ${PROJECT_BINARY_DIR}/man/rlock.${section})
  add_custom_command(
    OUTPUT ${page} ${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
    COMMAND ${RLOCK_SH} ${PROJECT_SOURCE_DIR}/man/scdoc-page ${source} ${page} ${RLOCK_MAN_EPOCH} ${RLOCK_ACL}
    COMMAND ${RLOCK_GZIP} -9 -n -k -f ${page}
    DEPENDS ${source} ${PROJECT_SOURCE_DIR}/man/scdoc-page ${RLOCK_ACL}
    COMMENT "Generating man page rlock.${section} with scdoc"
    VERBATIM)
  list(APPEND RLOCK_MAN_PAGES ${page}.gz)
  install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
add_custom_target(rlock_manpage ALL DEPENDS ${RLOCK_MAN_PAGES})

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
# LICENSE: MIT (Debian's "Expat"), DFSG-free and compatible with what the binary links (hiredis
# BSD-3-Clause, fmt MIT, CLI11 BSD-3-Clause, OpenSSL 3 Apache-2.0, loaded at run time).
set(RLOCK_PACKAGE_LICENSE "MIT"
  CACHE STRING "License tag of the RPM package (an SPDX expression, e.g. MIT)")
set(RLOCK_PACKAGE_URL ""
  CACHE STRING "Home page: Homepage of the Debian package, URL of the RPM (none if empty)")

# Write the values below into CPackConfig.cmake exactly as given here.
set(CPACK_VERBATIM_VARIABLES ON)
set(CPACK_GENERATOR DEB)  # and RPM when rpmbuild is found, below
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
if(RLOCK_PACKAGE_URL)
  set(CPACK_PACKAGE_HOMEPAGE_URL "${RLOCK_PACKAGE_URL}")
endif()
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

# RPM specifics. RPM-DEFAULT names the file rlock-<version>-<release>.<arch>.rpm.
set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
set(CPACK_RPM_PACKAGE_RELEASE 1)
set(CPACK_RPM_PACKAGE_LICENSE "${RLOCK_PACKAGE_LICENSE}")
set(CPACK_RPM_PACKAGE_GROUP "Applications/System")
set(CPACK_RPM_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
# Requires is computed by rpmbuild's dependency generator (elfdeps) from the
# binary's DT_NEEDED entries, as Depends is by dpkg-shlibdeps: with hiredis and
# libstdc++ linked statically (cmake/), that is libc and the dynamic loader.
# libssl.so.3 is loaded with dlopen for rediss:// only, so elfdeps cannot see it.
# Recommend the soname, as elfdeps would name it: every RPM distribution's
# OpenSSL 3 package provides it (Fedora and RHEL: openssl-libs; openSUSE:
# libopenssl3). redis-cli and redis-server are both in the package redis there.
# CMake 3.25 has no CPACK_RPM_PACKAGE_RECOMMENDS and drops
# CPACK_RPM_PACKAGE_SUGGESTS (its check for weak dependencies runs an rpm it
# never looked up), so both tags go into the spec's preamble through
# CPACK_RPM_SPEC_MORE_DEFINE, with two settings: _build_id_links none, no
# /usr/lib/.build-id links to the binary (files outside the six below); and no
# __os_install_post, whose brp-* steps would strip the binary again and drop its
# .comment section: CPack has stripped it and compressed the man pages already,
# and the RPM carries the same bytes as the .deb.
if(CMAKE_SIZEOF_VOID_P EQUAL 8)
  set(RLOCK_RPM_SONAME_MARK "()(64bit)")
else()
  set(RLOCK_RPM_SONAME_MARK "()")
endif()
set(CPACK_RPM_SPEC_MORE_DEFINE
"Recommends: libssl.so.3${RLOCK_RPM_SONAME_MARK}
Suggests: redis
%define _build_id_links none
%define __os_install_post %{nil}")
# Installed where the package says, not relocatable: the shells and man look
# for the completions and the page only under /usr.
set(CPACK_PACKAGE_RELOCATABLE OFF)
# Own only the six files, not the standard directories they go in (the
# distribution's filesystem package, or the shell's, owns those).
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION
  /usr/share/man /usr/share/man/man1 /usr/share/man/man7
  /usr/share/bash-completion /usr/share/bash-completion/completions
  /usr/share/zsh /usr/share/zsh/vendor-completions
  /usr/share/fish /usr/share/fish/vendor_completions.d)

# `cpack` without -G builds every generator in this list.
find_program(RLOCK_RPMBUILD rpmbuild)
if(RLOCK_RPMBUILD)
  list(APPEND CPACK_GENERATOR RPM)
endif()

# CPack writes a source package configuration whatever we do, and CMake then
# makes `package_source` run it. CPack's archive takes the owners and the order
# of the files from the disk (and their mtimes, unless SOURCE_DATE_EPOCH is
# set), so the same sources need not give the same bytes: send that
# configuration aside and define package_source below instead.
set(CPACK_SOURCE_OUTPUT_CONFIG_FILE ${PROJECT_BINARY_DIR}/CMakeFiles/CPackSourceConfig.cmake)

include(CPack)

# --- Source tarball -------------------------------------------------------------
# `make package_source`: the files git tracks, as they are in the working tree,
# as rlock-<version>/... in build/rlock-<version>.tar.gz (see
# packaging/source-tarball for what makes it reproducible).
# A build directory configured before this rule has CMake's own file there, which
# would reserve the name package_source.
file(REMOVE ${PROJECT_BINARY_DIR}/CPackSourceConfig.cmake)
set(RLOCK_SOURCE_TARBALL ${PROJECT_BINARY_DIR}/rlock-${PROJECT_VERSION}.tar.gz)
find_program(RLOCK_BASH bash REQUIRED)
add_custom_target(package_source
  COMMAND ${RLOCK_BASH} ${PROJECT_SOURCE_DIR}/packaging/source-tarball
    ${PROJECT_SOURCE_DIR} ${RLOCK_SOURCE_TARBALL} rlock-${PROJECT_VERSION}
  COMMENT "Packing the tracked sources into rlock-${PROJECT_VERSION}.tar.gz"
  VERBATIM)
