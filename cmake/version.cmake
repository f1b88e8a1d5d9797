# RLOCK_VERSION, what `rlock --version` prints: `git describe` of the checkout (a tag vX.Y.Z, and
# the commits since it), or, with no such tag, the project's version and the commit
# (0.1.0+gabc1234); with "-dirty" when the tracked files differ from it. A source tarball has no
# .git: there it is the project's version, as the tarball's name says. Read when CMake
# configures (scripts/setup runs it on every build).
set(RLOCK_VERSION ${PROJECT_VERSION})
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${PROJECT_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --tags --match "v[0-9]*" --dirty
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE described RESULT_VARIABLE failed
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT failed AND described MATCHES "^v([0-9].*)$")
    set(RLOCK_VERSION ${CMAKE_MATCH_1})
  else()
    execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --abbrev=7
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE commit RESULT_VARIABLE failed
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT failed AND commit MATCHES "^[0-9a-f]+(-dirty)?$")
      set(RLOCK_VERSION "${PROJECT_VERSION}+g${commit}")
    endif()
  endif()
endif()
