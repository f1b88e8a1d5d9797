#pragma once

#include "commands/options.hpp"
#include "lock/holds.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "lock/take.hpp"

#include <functional>
#include <string>
#include <vector>

namespace rlock::commands {

// The lock's Redis names under the configured prefix.
lock::LockName lock_name(const ConnectOptions& connect, const std::string& key);

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

// What a command shows while it waits (take_lock's progress hook): with -v, the first holder
// and each change of queue position; on a terminal, one line rewritten in place (erased when
// the object ends).
class WaitDisplay {
public:
  explicit WaitDisplay(const lock::LockName& name);
  ~WaitDisplay();
  WaitDisplay(const WaitDisplay&) = delete;
  WaitDisplay& operator=(const WaitDisplay&) = delete;
  void operator()(const lock::Attempt& attempt, util::Millis waited);

private:
  const lock::LockName& m_name;
  bool m_line;  // a terminal's rewritten line
  bool m_shown = false;
  bool m_logged = false;
};

// Writes all of text to stdout; throws rlock::Error 71 naming the failure (a closed pipe, a full
// disk): output that did not arrive is never a success.
void write_stdout(const std::string& text);

// The message for a lock found busy: who holds it (or that it lingers, and until when).
std::string busy_message(const lock::LockName& name, const lock::Attempt& attempt);
// The message for a request that a newer --supersede request replaced.
std::string superseded_message(const lock::LockName& name, const lock::Attempt& attempt);
// The message for a --once-per run whose tick (or a later one) another hold already ran.
std::string tick_done_message(const lock::LockName& name, const lock::Attempt& attempt, int64_t tick);
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
