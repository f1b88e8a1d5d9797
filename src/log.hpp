#pragma once

#include <fmt/core.h>

#include <string_view>

namespace rlock::log {

enum class Level { quiet, normal, verbose };

// Sets how much goes to stderr; errors are always printed.
void set_level(Level level);
Level level();

// Writes "rlock: error: MESSAGE" to stderr.
void error(std::string_view message);
// Writes "rlock: warning: MESSAGE" unless quiet.
void warning(std::string_view message);
// Writes "rlock: MESSAGE" unless quiet.
void info(std::string_view message);
// Writes "rlock: HH:MM:SS.mmm MESSAGE" when verbose: the timeline of a lock.
void verbose_line(std::string_view message);

inline bool verbose_enabled() { return level() == Level::verbose; }

template <typename... Args>
void verbose(fmt::format_string<Args...> format, Args&&... args) {
  if (verbose_enabled()) {
    verbose_line(fmt::format(format, std::forward<Args>(args)...));
  }
}

}  // namespace rlock::log
