#include "duration.hpp"

#include <fmt/core.h>

#include <cmath>
#include <cstdint>

namespace rlock::util {

namespace {

// Milliseconds in one unit, or 0 for an unknown unit.
double unit_millis(std::string_view unit) {
  if (unit == "ms") return 1.0;
  if (unit == "s" || unit.empty()) return 1000.0;
  if (unit == "m") return 60.0 * 1000;
  if (unit == "h") return 3600.0 * 1000;
  if (unit == "d") return 86400.0 * 1000;
  return 0.0;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::optional<Millis> parse_duration(std::string_view text, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<Millis> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (text.empty()) return fail("empty duration");
  if (text.front() == '-') return fail("a duration cannot be negative");

  double total = 0;
  size_t i = 0;
  bool bare = true;
  while (i < text.size()) {
    size_t start = i;
    bool dot = false;
    while (i < text.size() && (is_digit(text[i]) || (text[i] == '.' && !dot))) {
      dot = dot || text[i] == '.';
      ++i;
    }
    std::string_view number = text.substr(start, i - start);
    if (number.empty() || number == ".") return fail("expected a number");
    size_t unit_start = i;
    while (i < text.size() && !is_digit(text[i]) && text[i] != '.') ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    if (unit.empty() && i < text.size()) return fail("expected a unit");
    if (unit.empty() && !bare) return fail(fmt::format("missing unit after {}", number));
    double scale = unit_millis(unit);
    if (scale == 0.0) return fail(fmt::format("unknown unit '{}'", unit));
    bare = bare && unit.empty() && start == 0;
    // By hand: from_chars<double> and strtod pull in locales and libm, paid at every start-up.
    double value = 0;
    double place = 0;  // 0 before the dot, then 0.1, 0.01...
    for (char c : number) {
      if (c == '.') {
        place = 0.1;
      } else if (place == 0) {
        value = value * 10 + (c - '0');
        if (value > 1e12) return fail("too long: the limit is 365d");  // past any unit's year
      } else {
        value += (c - '0') * place;
        place /= 10;
      }
    }
    total += value * scale;
  }
  // A year of milliseconds is far beyond any lock; the bound keeps the arithmetic exact.
  if (!std::isfinite(total) || total > 365.0 * 86400 * 1000) return fail("too long: the limit is 365d");
  // total is non-negative and bounded: rounding by hand avoids loading libm for llround.
  return Millis(static_cast<int64_t>(total + 0.5));
}

std::string format_duration(Millis d) {
  int64_t ms = d.count();
  if (ms < 0) {
    std::string out(1, '-');
    out += format_duration(Millis(-ms));
    return out;
  }
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < int64_t{60} * 1000) {
    if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
    return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
  }
  int64_t s = ms / 1000;
  int64_t h = s / 3600;
  int64_t m = (s % 3600) / 60;
  s %= 60;
  std::string out;
  if (h) out += fmt::format("{}h", h);
  if (m) out += fmt::format("{}m", m);
  if (s && !h) out += fmt::format("{}s", s);
  return out;
}

}  // namespace rlock::util
