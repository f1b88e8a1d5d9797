#pragma once

#include "lock/backend.hpp"
#include "lock/schedule.hpp"

#include <functional>
#include <optional>
#include <string>

namespace rlock::lock {

// A held lease, as its renewals name it.
struct HeldLease {
  const LockName& name;
  const std::string& token;
  util::Millis ttl;
  int64_t fence = 0;
  std::optional<KeeperInfo> keeper;  // acquire --keepalive: the keeper, recorded with the hold
  bool tick_ran = false;             // run --once-per: the command starts after this renewal
};

// What one renewal found.
struct Renewal {
  enum class Outcome {
    renewed,      // the lease was reset and counts: the schedule moved on
    unconfirmed,  // reset, but no majority of the sentinels names the master: not counted
    failed,       // an error (error says which): not counted, tried again by the schedule
    lost,         // the token no longer owns the lock
  };
  Outcome outcome = Outcome::failed;
  std::optional<Extension> extension;  // renewed and unconfirmed
  std::string error;                   // failed
};

// One renewal of hold: the step that run and the keeper share. It is bounded by the schedule's
// attempt budget (half the time left before the stop: a slow or paused server leaves room for
// another attempt, whatever --io-timeout says). It learns a Cluster's nodes first (once, to follow
// a failover), asks a Sentinel deployment's majority to confirm the master, and tells the schedule
// the outcome: renewed from the time the request was sent, or failed. A lease that the server
// shows shorter than the schedule expects (its clock stepped forward) is warned about.
Renewal renew(Backend& backend, Schedule& schedule, const HeldLease& hold);

// Runs `step` (one exchange with the lock's server) and, while it throws Error 69 (a server that
// cannot be reached or cannot serve: a restart, LOADING, a master the sentinels do not confirm),
// runs it again every `interval` (the renewals' retry interval) until `until` (the lease's
// validity) is near, then throws the last error; other errors are thrown at once. The first
// attempt keeps the cap the caller set (none: a hold already lost is still given back wherever it
// remains); later ones are capped at `until`, and the cap is lifted at the end. `pause` sleeps between attempts, false
// to give up (a signal); without it, a plain sleep. Returns whether an attempt failed once its request may have left
// (it may have done its work: a later "not held" may be its own doing).
bool retry_within(Backend& backend, Clock::time_point until, util::Millis interval,
                  const std::function<bool(util::Millis)>& pause, const std::function<void()>& step);

// The final release of a hold, retried as above. After an attempt that may have run, the next
// is a retry (Ending::retry): the script tells its earlier attempt's release from a loss.
Released release_within(Backend& backend, const LockName& name, const std::string& token, const Ending& ending,
                        Clock::time_point until, util::Millis interval,
                        const std::function<bool(util::Millis)>& pause = {});

}  // namespace rlock::lock
