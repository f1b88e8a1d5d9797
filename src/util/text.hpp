#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rlock::util {

// The text as a JSON string literal, quotes included.
std::string json_quote(std::string_view text);

// Percent-encodes every byte outside [A-Za-z0-9._~/:-]; the inverse of percent_decode.
std::string percent_encode(std::string_view text);
// Decodes %XX escapes; returns false for a malformed escape.
bool percent_decode(std::string_view text, std::string& out);

// Splits on any of the separator characters, dropping empty pieces.
std::vector<std::string> split(std::string_view text, std::string_view separators);

// Text without leading and trailing spaces, tabs and newlines.
std::string_view trim(std::string_view text);

// Parses a whole decimal integer in [min, max].
bool parse_int(std::string_view text, long long min, long long max, long long& out);

}  // namespace rlock::util
