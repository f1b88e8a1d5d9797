#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlock::util {

// The text as a JSON string literal, quotes included, always valid UTF-8: control characters are
// escaped and each byte that is not part of a valid UTF-8 sequence becomes U+FFFD.
std::string json_quote(std::string_view text);

// A JSON number, or null.
template <typename T>
std::string json_or_null(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : "null";
}

// Milliseconds since the epoch as ISO 8601 UTC with milliseconds: 2026-11-25T17:03:36.123Z.
std::string iso_time(int64_t ms);

// The text made safe to show on a terminal, in a message or a table cell: valid UTF-8 passes,
// control characters (C0, DEL, C1), line and paragraph separators and bidirectional overrides
// are escaped (\n, \r, \t, \x1b, \u202e), and bytes that are not valid UTF-8 become \xNN. No
// escape sequence, line break or reordering reaches the terminal.
std::string printable(std::string_view text);

// Whether the text is well-formed UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
bool valid_utf8(std::string_view text);

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
