#pragma once

#include "commands/options.hpp"
#include "lock/backend.hpp"
#include "lock/holds.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "lock/take.hpp"
#include "util/clock.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rlock::commands {

// The lock's Redis names under the configured prefix.
lock::LockName lock_name(const ConnectOptions& connect, const std::string& key);

// Whether a KEY given to log, check or metrics is a glob pattern (it has *, ? or [).
bool is_pattern(const std::string& key);

// The locks a pattern names, for check and metrics: those under the prefix whose KEY matches it
// and that are held, waited for or have a summary (SCAN, never KEYS), sorted.
std::vector<std::string> matching_locks(lock::Backend& backend, const std::string& prefix, const std::string& pattern);

// This process as status shows it: host name, pid, user and the command given.
lock::Holder this_holder(const std::string& command);

// The holds of the enclosing process tree: those of enclosing runs (RLOCK_HELD) and those of
// keepers (acquire --keepalive) that watch a process this one descends from.
std::vector<lock::Hold> enclosing_holds();
// Only those of enclosing runs, which renew and release them themselves.
std::vector<lock::Hold> run_holds();

// The contender for options' kind of hold, with a new token.
lock::Contender make_contender(const TakeOptions& options, const lock::Holder& holder);

// How long to wait, from options.
lock::WaitLimits wait_limits(const TakeOptions& options);

// How a long wait (or a lock kept by leftovers) is shown without -v: where people look, on a
// terminal or in a CI's log, and nowhere else (cron mail). Neither with -q nor with -v (whose
// timestamped lines say it all).
enum class Progress {
  none,
  line,   // stderr is a terminal: one line, rewritten in place
  lines,  // a CI (CI, GITHUB_ACTIONS, GITLAB_CI, BUILDKITE, JENKINS_URL) or a dumb terminal: new lines
};
Progress progress_mode();
// A wait shorter than this shows nothing; so does a command's leftover tree that ends sooner.
inline constexpr util::Millis k_progress_after{2'000};
// In Progress::lines, a new line this often, and at once when the holder or the position changes.
inline constexpr util::Millis k_progress_every{30'000};

// What a command shows while it waits (take_lock's progress hook): with -v, the first holder
// and each change of queue position; after k_progress_after, the progress_mode() line (erased
// on a terminal when the object ends).
class WaitDisplay {
public:
  explicit WaitDisplay(const lock::LockName& name);
  ~WaitDisplay();
  WaitDisplay(const WaitDisplay&) = delete;
  WaitDisplay& operator=(const WaitDisplay&) = delete;
  void operator()(const lock::Attempt& attempt, util::Millis waited);
  // How often at least the wait's step is a full one, so that what it shows is current: with -v,
  // every step; a terminal's line, every few seconds; CI's lines, every second (the first is due
  // at k_progress_after, and a light step's view may be a heartbeat old).
  util::Millis fresh_every() const;
  // When the first line is due into the wait (k_progress_after), or 0 when nothing is shown.
  util::Millis first_shown() const;
  // The end of the wait: after a wait long enough to show, one line says that the lock was got,
  // and after how long ("got deploy after 1m12s").
  void done(const lock::Attempt& attempt);

private:
  const lock::LockName& m_name;
  Progress m_mode;
  bool m_shown = false;  // a terminal's line is on screen
  bool m_logged = false;
  // Progress::lines: when the last line was printed, and the holder and position it named.
  std::optional<util::BootClock::time_point> m_printed_at;
  std::string m_holder;
  int m_position = -1;
};

// For a waiter that may stop its holder (--preempt, --cancel-in-progress): says once per holder
// when that holder cannot be stopped, having been started without `flag` (--preemptible, or
// --cancel-in-progress), so that the wait is explained. Asks the server (inspect) only when the
// holder changes.
class PreemptNotice {
public:
  PreemptNotice(lock::Backend& backend, const lock::LockName& name, std::string flag, std::string word)
      : m_backend(backend), m_name(name), m_flag(std::move(flag)), m_word(std::move(word)) {}
  void operator()(const lock::Attempt& attempt);

private:
  lock::Backend& m_backend;
  const lock::LockName& m_name;
  std::string m_flag;    // the holder's option that it lacks
  std::string m_word;    // what it is not: "preemptible", "cancellable"
  std::string m_judged;  // the holder last judged ("host pid")
};

// Writes all of text to stdout; throws rlock::Error 71 naming the failure (a closed pipe, a full
// disk): output that did not arrive is never a success.
void write_stdout(const std::string& text);

// The message for a lock found busy: who holds it (or that it lingers, and until when).
std::string busy_message(const lock::LockName& name, const lock::Attempt& attempt);
// The message for a request that a newer --supersede request replaced (flag: the option the user
// gave, --supersede or --cancel-in-progress).
std::string superseded_message(const lock::LockName& name, const lock::Attempt& attempt,
                               const char* flag = "--supersede");
// The message for a --once-per run whose tick (or a later one) another hold already ran.
std::string tick_done_message(const lock::LockName& name, const lock::Attempt& attempt, util::Millis period);
// A --once-per tick (ms since the epoch, by the server's clock), as the messages show it: UTC, to
// the second.
std::string tick_time(int64_t ms);
// "host pid N (command)" of a holder or contender.
std::string who_text(const lock::Holder& holder);
// The same, with what rlock did about it: "...; not waiting (-n)" or "...; gave up after 5s (--wait)".
// "acquired KEY (fence N, ttl T)", and how long it waited for it if it did: the one -v line of an
// acquisition.
std::string acquired_text(const lock::LockName& name, const lock::Attempt& attempt, util::Millis ttl);

std::string busy_outcome(const lock::LockName& name, const lock::Attempt& attempt, const TakeOptions& options);

// Reads the token for release and extend: from the file, else the variable. Throws Error 65 for an
// unreadable or malformed file, 64 when neither gives a token.
std::string read_token(const TokenSource& source);

}  // namespace rlock::commands
