# Compiler settings shared by every target, as INTERFACE libraries.
add_library(rlock_settings INTERFACE)
target_compile_options(rlock_settings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Wnull-dereference
  -Wformat=2 -Wimplicit-fallthrough)
if(RLOCK_WERROR)
  target_compile_options(rlock_settings INTERFACE -Werror)
endif()
target_compile_definitions(rlock_settings INTERFACE _GNU_SOURCE RLOCK_VERSION="${RLOCK_VERSION}")
# fmt: compiled into rlock (header-only), so that no libfmt.so is loaded at each start-up; or
# linked from Debian's libfmt (RLOCK_FMT_SHARED, the default of the sanitizer build), so that each
# unit does not compile fmt's implementation again: a fifth to a quarter of each unit's time.
if(RLOCK_FMT_SHARED)
  target_link_libraries(rlock_settings INTERFACE fmt::fmt)
else()
  target_compile_definitions(rlock_settings INTERFACE FMT_HEADER_ONLY)
endif()
if(RLOCK_SANITIZE)
  target_compile_options(rlock_settings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)
  target_link_options(rlock_settings INTERFACE -fsanitize=address,undefined)
else()
  # Start-up is paid by every cron job: no libstdc++ to load and relocate, and no code that
  # nothing calls (each function and datum in a section of its own, dropped at link time when
  # unused: a third of the binary).
  target_compile_options(rlock_settings INTERFACE -ffunction-sections -fdata-sections)
  target_link_options(rlock_settings INTERFACE -static-libstdc++ -static-libgcc -Wl,--as-needed -Wl,--gc-sections)
endif()
