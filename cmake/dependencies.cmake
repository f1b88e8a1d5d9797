# Debian's CMake config for hiredis is broken; pkg-config finds it reliably.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
find_package(CLI11 CONFIG QUIET)
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
find_path(FMT_INCLUDE_DIR fmt/format.h REQUIRED)
if(RLOCK_FMT_SHARED)
  find_package(fmt CONFIG REQUIRED)
endif()

# Link hiredis statically: it is small, and a static link avoids loading it.
find_library(HIREDIS_STATIC libhiredis.a PATHS ${HIREDIS_LIBRARY_DIRS})
add_library(rlock_hiredis INTERFACE)
# Always include <hiredis/hiredis.h>, never the bare header.
target_include_directories(rlock_hiredis INTERFACE /usr/include)
if(HIREDIS_STATIC AND NOT RLOCK_SANITIZE)
  target_link_libraries(rlock_hiredis INTERFACE ${HIREDIS_STATIC})
else()
  target_link_libraries(rlock_hiredis INTERFACE ${HIREDIS_LINK_LIBRARIES})
endif()

# OpenSSL's headers only: libssl is loaded with dlopen when a rediss:// URL needs it
# (src/redis/openssl.cpp), so runs without TLS never pay for loading it.
find_package(OpenSSL REQUIRED)
add_library(rlock_openssl INTERFACE)
target_include_directories(rlock_openssl INTERFACE ${OPENSSL_INCLUDE_DIR})
target_link_libraries(rlock_openssl INTERFACE ${CMAKE_DL_LIBS})

# Python 3 runs the lock protocol's generator at build time (src/lock/generate.py) and its tests.
find_program(Python3_EXECUTABLE NAMES python3 REQUIRED)
