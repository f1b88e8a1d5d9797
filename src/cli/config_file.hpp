#pragma once

#include <map>
#include <string>
#include <string_view>

namespace rlock::cli {

// The settings of a config file: option name (with '-', as on the command line) to its value as text.
using ConfigValues = std::map<std::string, std::string>;

// Parses the TOML subset rlock reads: top-level `name = value` lines, where value is a "basic
// string", a 'literal string', an integer or decimal, or true/false; `#` comments and blank lines.
// `_` in names is read as `-`. Throws rlock::Error 78 naming the file and line on anything else.
ConfigValues parse_config(std::string_view text, const std::string& path);

}  // namespace rlock::cli
