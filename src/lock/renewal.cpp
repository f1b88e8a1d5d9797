#include "lock/renewal.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/validity.hpp"
#include "log.hpp"
#include "util/clock.hpp"

#include <fmt/core.h>

namespace rlock::lock {

namespace {

// Redis keeps a key's expiry as a wall-clock time: a forward step of the server's clock shortens
// every lease on it. rlock cannot undo that, but it says so.
void check_clock(const Schedule& schedule, const HeldLease& hold, const Extension& extension,
                 Clock::time_point sent_at) {
  if (!extension.ttl_left_before) return;
  util::Millis expected = schedule.expected_ttl_left(sent_at);
  util::Millis shortfall = expected - *extension.ttl_left_before;
  if (shortfall > validity::drift(hold.ttl) + util::Millis(100)) {
    log::warning(fmt::format(
        "the lease of {} had {} left on the server at renewal, {} shorter than it should have: "
        "the server's clock may have stepped forward (Redis keeps expiry times on its wall "
        "clock)",
        hold.name.key, util::format_duration(*extension.ttl_left_before), util::format_duration(shortfall)));
  }
}

}  // namespace

Renewal renew(Backend& backend, Schedule& schedule, const HeldLease& hold) {
  Renewal out;
  auto now = Clock::now();
  backend.cap_waits(now + schedule.attempt_budget(now));
  try {
    backend.learn_nodes();
    bool confirmed = backend.confirm_master();
    auto sent_at = Clock::now();
    out.extension =
        backend.extend(hold.name, hold.token, hold.ttl, hold.ttl, hold.fence, ExtendNote{hold.keeper, hold.tick_ran});
    backend.cap_waits(std::nullopt);
    if (!out.extension) {
      out.outcome = Renewal::Outcome::lost;
    } else if (!confirmed) {
      out.outcome = Renewal::Outcome::unconfirmed;
      schedule.failed(Clock::now());
    } else {
      out.outcome = Renewal::Outcome::renewed;
      check_clock(schedule, hold, *out.extension, sent_at);
      schedule.renewed(sent_at);
    }
  } catch (const Error& e) {
    backend.cap_waits(std::nullopt);
    out.error = e.what();
    // Another program's data at the lock's key: the token does not hold the lock.
    if (e.exit_code() == exit_code::k_data) {
      log::verbose("{}", e.what());
      out.outcome = Renewal::Outcome::lost;
      return out;
    }
    schedule.failed(Clock::now());
    out.outcome = Renewal::Outcome::failed;
  }
  return out;
}

bool retry_within(Backend& backend, Clock::time_point until, util::Millis interval,
                  const std::function<bool(util::Millis)>& pause, const std::function<void()>& step) {
  bool may_have_run = false;
  for (bool first = true;; first = false) {
    if (!first) backend.cap_waits(until);
    try {
      step();
      backend.cap_waits(std::nullopt);
      return may_have_run;
    } catch (const Error& e) {
      backend.cap_waits(std::nullopt);
      if (e.exit_code() != exit_code::k_unavailable || Clock::now() + interval >= until) throw;
      // An error reply (LOADING, READONLY...) ran nothing; a lost connection may have.
      if (dynamic_cast<const TransientError*>(&e) == nullptr) may_have_run = true;
      log::verbose("{}; again in {}", e.what(), util::format_duration(interval));
      if (pause) {
        if (!pause(interval)) throw;
      } else {
        util::poll_until(nullptr, 0, Clock::now() + interval);
      }
    }
  }
}

Released release_within(Backend& backend, const LockName& name, const std::string& token, const Ending& ending,
                        Clock::time_point until, util::Millis interval,
                        const std::function<bool(util::Millis)>& pause) {
  Released r = Released::unknown;
  Ending attempt = ending;
  retry_within(backend, until, interval, pause, [&] {
    try {
      r = backend.release(name, token, attempt);
    } catch (const Error& e) {
      // As retry_within counts it: the next attempt tells the script that this one may have run,
      // and the script looks for its record before it says "not held".
      if (dynamic_cast<const TransientError*>(&e) == nullptr) attempt.retry = true;
      throw;
    }
  });
  return r;
}

}  // namespace rlock::lock
