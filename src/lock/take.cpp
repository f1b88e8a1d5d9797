#include "take.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/backoff.hpp"
#include "log.hpp"
#include "util/clock.hpp"
#include "util/random.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>

namespace rlock::lock {

namespace {

using Clock = util::BootClock;
using util::Millis;

Millis until(std::optional<Clock::time_point> t) { return std::chrono::ceil<Millis>(*t - Clock::now()); }

}  // namespace

Attempt take_lock(Backend& backend, const LockName& name, const WaitLimits& limits, const Contender& contender,
                  const std::vector<std::string>& enclosing_tokens, const WaitHooks& hooks) {
  auto start = Clock::now();
  std::optional<Clock::time_point> give_up;
  if (limits.wait) give_up = start + *limits.wait;
  const bool waiting = !limits.wait || limits.wait->count() > 0;
  const Millis heartbeat = backend.timing().heartbeat;
  Backoff backoff;
  bool reached = false;  // the server has answered once: later failures are blips to wait out
  bool queued = false;   // we have (or had) a place in the queue: leave it when giving up
  int position = 0;
  Attempt a;
  int contended_tries = 0;
  auto leave = [&](bool timed_out) {
    if (!queued) return;
    try {
      backend.cancel(name, contender.token, timed_out);
    } catch (const Error& e) {
      log::verbose("could not leave the queue of {} ({}); the place lapses within seconds", name.key, e.what());
    }
  };
  auto waited = [&] { return std::chrono::duration_cast<Millis>(Clock::now() - start); };

  for (;;) {
    try {
      if (queued) {
        // The head of the queue wakes when the holder's lease (or a lingering hold) ends, not
        // a heartbeat later.
        Millis beat = heartbeat;
        if (a.position == 1 && a.ttl_left) beat = std::min(beat, *a.ttl_left + Millis(2));
        if (give_up) beat = std::min(beat, until(give_up));
        a = backend.wait_turn(name, contender, a.watch, std::max(beat, Millis(1)));
      } else {
        a = backend.try_acquire(name, contender, waiting, enclosing_tokens);
      }
      reached = true;
      std::string why;
      if (a.outcome == Attempt::Outcome::acquired && !backend.confirm_grant(name, contender.token, why)) {
        // Granted by a master the sentinels no longer name (its queue outlived a failover): given
        // back, and asked for again on the master they name, as after any failover.
        queued = false;
        throw Error(exit_code::k_unavailable,
                    fmt::format("{}: granted by a server that is not the confirmed master ({})", name.key, why));
      }
    } catch (const Error& e) {
      if (hooks.interrupted()) {
        leave(false);
        return Attempt{};
      }
      // A server that cannot serve for a moment (TRYAGAIN, LOADING...), or one that went away
      // after answering (a restart, a failover), is waited out while the wait lasts, but never
      // reported as busy; a wait step after it joins the queue again if the queue was lost. A
      // server never reached is a configuration problem: exit 69 at once rather than wait on a
      // typo.
      bool transient =
          dynamic_cast<const TransientError*>(&e) != nullptr || (reached && e.exit_code() == exit_code::k_unavailable);
      bool can_wait = (waiting || queued) && (!give_up || Clock::now() + Millis(50) < *give_up);
      if (!transient || !can_wait) {
        if (!transient) leave(false);
        throw;
      }
      log::verbose("{}; retrying", e.what());
      Millis sleep = backoff.next(std::nullopt);
      if (give_up) sleep = std::min(sleep, until(give_up));
      if (!hooks.pause(std::max(sleep, Millis(1)))) {
        leave(false);
        return Attempt{};
      }
      continue;
    }
    if (a.outcome == Attempt::Outcome::acquired && limits.wait_replicas > 0) {
      try {
        backend.confirm_replicas(name, limits.wait_replicas, limits.wait_timeout);
      } catch (const Error&) {
        backend.release(name, contender.token, Ending{});
        throw;
      }
    }
    // A quorum has no queue: a busy lock is tried again after a random delay while the wait
    // lasts; one that nobody holds on a majority (leftovers, a split vote) is the next attempt's
    // business even with -n.
    if (backend.quorum() && a.outcome == Attempt::Outcome::busy &&
        ((waiting && (!give_up || Clock::now() < *give_up)) || (a.contended && ++contended_tries < 4))) {
      if (hooks.progress) hooks.progress(a, waited());
      Millis sleep = backoff.next(a.ttl_left);
      if (give_up) sleep = std::min(sleep, until(give_up));
      if (!waiting) sleep = Millis(10 + static_cast<int64_t>(util::random_below(40)));
      if (!hooks.pause(std::max(sleep, Millis(1)))) return Attempt{};
      continue;
    }
    if (a.outcome == Attempt::Outcome::superseded) {
      log::verbose("{}: a newer request superseded this one (--supersede)", name.key);
      return a;
    }
    if (a.outcome != Attempt::Outcome::queued) {
      // The caller says "acquired", once, with how long it waited.
      if (a.outcome == Attempt::Outcome::acquired && queued) a.waited = waited();
      return a;  // acquired, reentered, or busy (-n)
    }
    if (!waiting && !queued) {
      // -n with --preempt: a --preemptible holder was asked to stop. It is waited for no longer
      // than its lease had left (a stop ends within it), plus a heartbeat.
      give_up = a.sent_at + a.ttl_left.value_or(Millis(0)) + heartbeat;
      log::verbose("{}: asked its --preemptible holder to stop (--preempt); waiting for it at most {}", name.key,
                   util::format_duration(std::chrono::ceil<Millis>(*give_up - Clock::now())));
    }
    queued = true;
    if (a.position != position) {
      log::verbose("waiting for {}: position {} of {}", name.key, a.position, a.queue_length);
      position = a.position;
    }
    if (hooks.progress) hooks.progress(a, waited());
    if (hooks.interrupted() || (give_up && Clock::now() >= *give_up)) {
      leave(!hooks.interrupted());
      a.outcome = Attempt::Outcome::busy;
      // The queue it reported counted this request, which has left it.
      a.queue_length = std::max(a.queue_length - 1, 0);
      return a;
    }
  }
}

}  // namespace rlock::lock
