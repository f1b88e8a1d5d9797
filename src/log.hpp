#pragma once

#include "util/clock.hpp"

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

// From now on every line goes to syslog (facility user, ident rlock) instead of stderr.
void use_syslog();

// How grave an event is, as syslog counts (RFC 5424 severities).
enum class Severity { err = 3, warning = 4, notice = 5, info = 6 };

// --syslog: from now on, the events of a lock (event() below) also go to syslog.
void enable_syslog_events();
bool syslog_events_enabled();

// One event of a lock's life (acquired, busy, lost, released), with key, holder and durations,
// for "why didn't my cron job run last night?". Sent to syslog when --syslog is on; nothing
// otherwise. Syslog lines are datagrams to /dev/log ($RLOCK_SYSLOG_SOCKET) sent without
// blocking: a stalled syslog loses lines, it never holds rlock up.
void event_line(Severity severity, std::string_view message);

// event_line with the message formatted only when --syslog is on.
template <typename... Args>
void event(Severity severity, fmt::format_string<Args...> format, Args&&... args) {
  if (syslog_events_enabled()) event_line(severity, fmt::format(format, std::forward<Args>(args)...));
}

// Writes text to stderr as it is (an updating status line's control sequences are rlock's own;
// whatever it quotes must have gone through util::printable).
void raw(std::string_view text);

// From now on, writing to stderr never blocks: stderr gets an open file description of its own
// with O_NONBLOCK (the child keeps the blocking one it shares), lines that cannot be written at
// once wait in a queue of at most 64 KiB, and lines past that are dropped and counted. run calls
// this before it holds a lock, so a stalled stderr (a full pipe, a terminal paused with ^S) can
// never hold up its loop.
void set_nonblocking();
// The descriptor to poll for POLLOUT while lines wait in the queue; -1 when none wait.
int pending_fd();
// Writes what it can of the waiting lines without blocking.
void drain();
// Writes the waiting lines, waiting for stderr at most until deadline; drops what is left.
void flush(util::BootClock::time_point deadline);

}  // namespace rlock::log
