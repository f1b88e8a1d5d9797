#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rlock::util {

using Millis = std::chrono::milliseconds;

// Parses "500ms", "30s", "5m", "1h30m", "1.5s", "2d", or a bare number of seconds ("1.5").
// Returns nullopt with a reason in *why for anything else, including negative values.
std::optional<Millis> parse_duration(std::string_view text, std::string* why = nullptr);

// Formats a duration for people: "250ms", "1.5s", "5m", "1h30m".
std::string format_duration(Millis d);

}  // namespace rlock::util
