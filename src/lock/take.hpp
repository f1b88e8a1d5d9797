#pragma once

#include "lock/backend.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "util/duration.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// How long and how to wait for a lock (run and acquire).
struct WaitLimits {
  std::optional<util::Millis> wait;  // nullopt: for ever; 0: not at all (-n)
  int wait_replicas = 0;             // WAIT for this many replicas after acquiring
  util::Millis wait_timeout{1'000};
};

// What take_lock needs of its caller while it waits.
struct WaitHooks {
  // Sleeps for the given time; false to give up (a signal arrived).
  std::function<bool(util::Millis)> pause;
  // Whether a signal has ended the wait (checked after a Redis call was cut short).
  std::function<bool()> interrupted;
  // Each answer while the lock is busy or queued, with the time waited so far (a progress line).
  std::function<void(const Attempt&, util::Millis)> progress;
  // How often at least a wait step is a full one, for the position and holder that progress shows
  // (0: as the protocol needs; a light step keeps the last full step's).
  util::Millis fresh_every{0};
  // When, into the wait, progress shows its first line (0: it shows none): a step is taken then,
  // whatever the heartbeat, so that a waiter far behind in the queue does not show it a far
  // heartbeat late.
  util::Millis first_shown{0};
};

// Takes the lock, waiting in its queue (FIFO, woken at once on release, a heartbeat at least
// every Timing::heartbeat) for at most limits.wait; with -n, only when it is free and nobody
// waits (--preempt: or once a --preemptible holder it asked let go, within the lease it had left
// and a heartbeat). Server blips after the first answer are waited out with backoff, never reported as busy.
// Leaves the queue whenever it gives up. Returns the last attempt: acquired, reentered, busy when
// the wait ran out or a signal ended it, superseded when a newer request took its place, or done
// when another hold ran its --once-per tick (checked again when it is granted).
// A Redlock quorum has no queue: a busy lock is tried again after a random delay while the wait
// lasts (and a lock that nobody holds on a majority a few times even with -n).
Attempt take_lock(Backend& backend, const LockName& name, const WaitLimits& limits, const Contender& contender,
                  const std::vector<std::string>& enclosing_tokens, const WaitHooks& hooks);

}  // namespace rlock::lock
