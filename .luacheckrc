-- luacheck's settings for the lock scripts (src/lock/scripts/*.lua). scripts/lint checks them as
-- the server runs them: the function library the build makes (src/lock/generate.py luacheck), the
-- protocol's prelude and common.lua once, then each script as a function(KEYS, ARGV) of its own.
-- So the prelude's tables (CODE, AT, KEY, ...) and common.lua's functions are locals that luacheck
-- sees defined and used, not globals declared here; and KEYS and ARGV are each function's
-- arguments, not globals (a script run by FCALL has no global KEYS or ARGV).

-- The Lua of Redis: 5.1, without io, os, package and loading files, and with its own libraries.
std = "lua51"
not_globals = {"io", "os", "package", "require", "module", "dofile", "loadfile"}
read_globals = {"redis", "cjson", "cmsgpack", "bit", "struct"}
max_line_length = 120
