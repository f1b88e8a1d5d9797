#pragma once

#include "commands/options.hpp"
#include "lock/holds.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "commands/locker.hpp"
#include "redis/client.hpp"
#include "redis/connection.hpp"

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

// What take_lock needs of its caller while it waits.
struct WaitHooks {
  // Sleeps for the given time; false to give up (a signal arrived).
  std::function<bool(util::Millis)> pause;
  // Whether a signal has ended the wait (checked after a Redis call was cut short).
  std::function<bool()> interrupted;
};

// Takes the lock, waiting in its queue (FIFO, woken at once on release, a heartbeat every
// second) for at most options.wait; with -n, only when it is free and nobody waits. Server
// blips after the first answer are waited out with backoff. Shows the holder and the queue
// position on a terminal (or logs position changes with -v). Leaves the queue whenever it gives
// up. Returns the last attempt: acquired, reentered, or busy when the wait ran out or a signal
// ended it.
// A Redlock quorum has no queue: a busy lock is tried again after a random delay while the wait
// lasts (and a lock that nobody holds on a majority a few times even with -n).
lock::Attempt take_lock(Locker& locker, const lock::LockName& name, const TakeOptions& options,
                        const lock::Contender& contender, const std::vector<std::string>& enclosing_tokens,
                        const WaitHooks& hooks);

// How long a waiter blocks between heartbeats.
inline constexpr util::Millis k_heartbeat{1000};


// Writes all of text to stdout; throws rlock::Error 71 naming the failure (a closed pipe, a full
// disk): output that did not arrive is never a success.
void write_stdout(const std::string& text);

// The message for a lock found busy: who holds it.
std::string busy_message(const lock::LockName& name, const lock::Attempt& attempt);
// The same, with what rlock did about it: "...; not waiting (-n)" or "...; gave up after 5s (--wait)".
std::string busy_outcome(const lock::LockName& name, const lock::Attempt& attempt, const TakeOptions& options);

// Reads the token for release and extend: from the file, else the variable. Throws Error 65 for an
// unreadable or malformed file, 64 when neither gives a token.
std::string read_token(const TokenSource& source);

}  // namespace rlock::commands
