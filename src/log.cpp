#include "log.hpp"

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <string>

namespace rlock::log {

namespace {

Level g_level = Level::normal;

void write_line(std::string line) {
  line += '\n';
  // One write per line, so lines from concurrent rlock processes do not interleave.
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, data, left);
    if (n <= 0) {
      return;
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

void set_level(Level level) { g_level = level; }

Level level() { return g_level; }

void error(std::string_view message) { write_line(fmt::format("rlock: error: {}", message)); }

void warning(std::string_view message) {
  if (g_level != Level::quiet) {
    write_line(fmt::format("rlock: warning: {}", message));
  }
}

void info(std::string_view message) {
  if (g_level != Level::quiet) {
    write_line(fmt::format("rlock: {}", message));
  }
}

void verbose_line(std::string_view message) {
  timeval now{};
  gettimeofday(&now, nullptr);
  tm local{};
  localtime_r(&now.tv_sec, &local);
  write_line(fmt::format("rlock: {:02}:{:02}:{:02}.{:03} {}", local.tm_hour, local.tm_min, local.tm_sec,
                         now.tv_usec / 1000, message));
}

}  // namespace rlock::log
