#include "take.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/backoff.hpp"
#include "log.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/random.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>

namespace rlock::lock {

namespace {

using Clock = util::BootClock;
using util::Millis;

Millis until(std::optional<Clock::time_point> t) { return std::chrono::ceil<Millis>(*t - Clock::now()); }

// One take_lock: the loop asks (a first attempt, then a wait step while it has a place in the
// queue), and each answer goes to the step of its phase: a server error waited out, the Redlock
// retry of a busy quorum, or the queue wait.
class Taking {
public:
  Taking(Backend& backend, const LockName& name, const WaitLimits& limits, const Contender& contender,
         const std::vector<std::string>& enclosing_tokens, const WaitHooks& hooks)
      : m_backend(backend),
        m_name(name),
        m_limits(limits),
        m_contender(contender),
        m_enclosing(enclosing_tokens),
        m_hooks(hooks),
        m_start(Clock::now()),
        m_waiting(!limits.wait || limits.wait->count() > 0),
        m_heartbeat(backend.timing().heartbeat) {
    if (limits.wait) m_give_up = m_start + *limits.wait;
  }

  Attempt run() {
    for (;;) {
      try {
        ask();
      } catch (const Error& e) {
        switch (after_error(e)) {
          case Next::again: continue;
          case Next::interrupted: return Attempt{};
          case Next::fail: throw;
        }
      }
      confirm_replicas();
      if (quorum_tries_again()) {
        if (!pause_before_retry()) return Attempt{};
        continue;
      }
      if (m_a.outcome != Attempt::Outcome::queued) return answered();
      if (!m_waiting && !m_queued) preempt_without_waiting();
      if (!keep_place()) return leave_queue();
    }
  }

private:
  enum class Next { again, interrupted, fail };

  // The first attempt, or the next wait step once queued (at once, without blocking, after a
  // failure or a move). A grant the master does not confirm is an error, waited out as after a
  // failover.
  void ask() {
    if (m_queued) {
      auto now = Clock::now();
      bool at_once = m_step_now;
      m_step_now = false;
      Millis beat = at_once ? Millis(0) : next_beat();
      // (Fresh by when the step ends, which is when what it shows is read.)
      bool fresh = m_hooks.fresh_every.count() > 0 && now + beat >= m_full_at + m_hooks.fresh_every;
      m_a = m_backend.wait_turn(m_name, m_contender, carried(), beat, fresh);
      if (!m_a.light) m_full_at = now;
      noted();
      follow_master();
    } else {
      m_a = m_backend.try_acquire(m_name, m_contender, m_waiting, m_enclosing);
      noted();
    }
    m_reached = true;
    std::string why;
    if (m_a.outcome == Attempt::Outcome::acquired && !m_backend.confirm_grant(m_name, m_contender.token, why)) {
      // Granted by a master that the majority (of the sentinels, of a Cluster's masters) no
      // longer names (its queue outlived a failover): given back, and asked for again where they
      // name, as after any failover; a waiter joins the queue there again in its order, at once.
      m_step_now = m_queued;
      m_place_lost = true;
      throw Error(exit_code::k_unavailable,
                  fmt::format("{}: granted by a server that is not the confirmed master ({})", m_name.key, why));
    }
  }

  // After an answer: a place in the queue is noted (its arrival, the lease it has, since when).
  void noted() {
    if (m_a.outcome != Attempt::Outcome::queued) return;
    if (!m_a.arrival.empty()) m_arrival = m_a.arrival;
    m_renewed_at = m_a.sent_at;
    m_place_lease = m_a.far ? m_backend.timing().far_lease() : m_backend.timing().lease;
    m_place_lost = false;
  }

  // The last answer, for the next wait step, with the arrival to join the queue again at if the
  // place is gone: only when the server lost it (a failover, a restart, a server error since
  // the last step), not when it can have lapsed (a waiter stopped for longer than its lease joins
  // again at the end, as documented).
  Attempt carried() const {
    Attempt last = m_a;
    last.rejoin_waited.reset();
    last.arrival = m_arrival;
    bool alive = Clock::now() - m_renewed_at < m_place_lease - m_place_lease / 20;
    if (!m_arrival.empty() && (alive || m_place_lost)) last.rejoin_waited = waited();
    return last;
  }

  // Sentinel: a waiter asks the sentinels at once when it becomes the head of the queue, then at
  // every step at the head (about every second), and every second step behind others (about
  // every 5s); when a majority names another master, the next step is a full one there, at once
  // (whatever the light step found on the old master): the waiter's place is there, or is made
  // there in its old order.
  void follow_master() {
    if (m_a.outcome != Attempt::Outcome::queued) return;
    bool head = m_a.position == 1;
    bool due = head || ++m_steps_unchecked >= 2;
    if (!due) return;
    m_steps_unchecked = 0;
    if (!m_backend.follow_master()) return;
    log::verbose("{}: the master moved; stepping in its queue at once", m_name.key);
    m_a = m_backend.wait_turn(m_name, m_contender, carried(), Millis(0), true);
    noted();
  }

  // How long the next wait step may block: a heartbeat (the far one behind others, see
  // Timing::far_heartbeat) give or take a random tenth of it (so that waiters queued by one timer
  // do not all step in the same instant, and still step once a heartbeat on average), less for
  // the head of the queue, and never past the end of the wait.
  Millis next_beat() const {
    Millis heartbeat = m_a.far ? m_backend.timing().far_heartbeat() : m_heartbeat;
    int64_t tenth = heartbeat.count() / 10;
    Millis beat = heartbeat - Millis(tenth) +
                  Millis(static_cast<int64_t>(m_backend.timing().jitter(static_cast<uint64_t>(2 * tenth) + 1)));
    // The head of the queue wakes when the holder's lease (or a lingering hold) ends, not a
    // heartbeat later.
    if (m_a.position == 1 && m_a.ttl_left) beat = std::min(beat, *m_a.ttl_left + Millis(2));
    // The step that the first progress line shows (full: fresh_every is shorter than the wait).
    if (Millis into = waited(); m_hooks.first_shown > into) beat = std::min(beat, m_hooks.first_shown - into);
    if (m_give_up) beat = std::min(beat, until(m_give_up));
    return std::max(beat, Millis(1));
  }

  // A server error: waited out with backoff (again), or the end of the wait.
  Next after_error(const Error& e) {
    if (m_hooks.interrupted()) {
      leave(false);
      return Next::interrupted;
    }
    // A server that cannot serve for a moment (TRYAGAIN, LOADING...), or one that went away
    // after answering (a restart, a failover), is waited out while the wait lasts, but never
    // reported as busy; a wait step after it joins the queue again if the queue was lost. A
    // server never reached is a configuration problem: exit 69 at once rather than wait on a
    // typo.
    bool transient =
        dynamic_cast<const TransientError*>(&e) != nullptr || (m_reached && e.exit_code() == exit_code::k_unavailable);
    bool can_wait = (m_waiting || m_queued) && (!m_give_up || Clock::now() + Millis(50) < *m_give_up);
    if (!transient || !can_wait) {
      if (!transient) leave(false);
      return Next::fail;
    }
    log::verbose("{}; retrying", e.what());
    // A waiter's place may be lost with the server: the next step is a full one, at once (after
    // the pause), and joins the queue again in its order.
    if (m_queued) {
      m_step_now = true;
      m_place_lost = true;
    }
    Millis sleep = m_backoff.next(std::nullopt);
    if (m_give_up) sleep = std::min(sleep, until(m_give_up));
    if (!m_hooks.pause(std::max(sleep, Millis(1)))) {
      leave(false);
      return Next::interrupted;
    }
    return Next::again;
  }

  // --wait-replicas: a grant the replicas do not confirm is given back.
  void confirm_replicas() {
    if (m_a.outcome != Attempt::Outcome::acquired || m_limits.wait_replicas <= 0) return;
    try {
      m_backend.confirm_replicas(m_name, m_limits.wait_replicas, m_limits.wait_timeout);
    } catch (const Error&) {
      m_backend.release(m_name, m_contender.token, Ending{});
      throw;
    }
  }

  // The Redlock retry. A quorum has no queue: a busy lock is tried again after a random delay
  // while the wait lasts; one that nobody holds on a majority (leftovers, a split vote) is the
  // next attempt's business even with -n, a few times.
  bool quorum_tries_again() {
    if (!m_backend.quorum() || m_a.outcome != Attempt::Outcome::busy) return false;
    if (m_waiting && (!m_give_up || Clock::now() < *m_give_up)) return true;
    return m_a.contended && ++m_contended_tries < 4;
  }

  // The delay before the quorum's next attempt; false when a signal ended it.
  bool pause_before_retry() {
    if (m_hooks.progress) m_hooks.progress(m_a, waited());
    Millis sleep = m_backoff.next(m_a.ttl_left);
    if (m_give_up) sleep = std::min(sleep, until(m_give_up));
    if (!m_waiting) sleep = Millis(10 + static_cast<int64_t>(util::random_below(40)));
    return m_hooks.pause(std::max(sleep, Millis(1)));
  }

  // An answer that ends the wait: acquired, reentered, busy (-n), superseded, or done (its
  // --once-per tick was run: a place or a grant it has is given up).
  Attempt answered() {
    if (m_a.outcome == Attempt::Outcome::done) {
      leave(false);
      return m_a;
    }
    if (m_a.outcome == Attempt::Outcome::superseded) {
      log::verbose("{}: a newer request superseded this one (--supersede)", m_name.key);
      return m_a;
    }
    // The caller says "acquired", once, with how long it waited.
    if (m_a.outcome == Attempt::Outcome::acquired && m_queued) m_a.waited = waited();
    return m_a;
  }

  // -n with --preempt: a --preemptible holder was asked to stop. It is waited for no longer than
  // its lease had left (a stop ends within it), plus a heartbeat.
  void preempt_without_waiting() {
    m_give_up = m_a.sent_at + m_a.ttl_left.value_or(Millis(0)) + m_heartbeat;
    log::verbose("{}: asked its --preemptible holder to stop (--preempt); waiting for it at most {}", m_name.key,
                 util::format_duration(std::chrono::ceil<Millis>(*m_give_up - Clock::now())));
  }

  // The queue wait: records the place the answer gave; false when the wait is over (a signal, or
  // the wait ran out).
  bool keep_place() {
    m_queued = true;
    if (m_a.position != m_position) {
      log::verbose("waiting for {}: position {} of {}", m_name.key, m_a.position, m_a.queue_length);
      m_position = m_a.position;
    }
    if (m_hooks.progress) m_hooks.progress(m_a, waited());
    return !(m_hooks.interrupted() || (m_give_up && Clock::now() >= *m_give_up));
  }

  // Gives up the place in the queue: busy.
  Attempt leave_queue() {
    leave(!m_hooks.interrupted());
    m_a.outcome = Attempt::Outcome::busy;
    // The queue it reported counted this request, which has left it.
    m_a.queue_length = std::max(m_a.queue_length - 1, 0);
    return m_a;
  }

  // Leaves the queue, if it has (or had) a place there.
  void leave(bool timed_out) {
    if (!m_queued) return;
    try {
      m_backend.cancel(m_name, m_contender.token, timed_out);
    } catch (const Error& e) {
      log::verbose("could not leave the queue of {} ({}); the place lapses within seconds", m_name.key, e.what());
    }
  }

  Millis waited() const { return std::chrono::duration_cast<Millis>(Clock::now() - m_start); }

  Backend& m_backend;
  const LockName& m_name;
  const WaitLimits& m_limits;
  const Contender& m_contender;
  const std::vector<std::string>& m_enclosing;
  const WaitHooks& m_hooks;
  Clock::time_point m_start;
  std::optional<Clock::time_point> m_give_up;
  bool m_waiting;
  Millis m_heartbeat;
  Backoff m_backoff;
  bool m_reached = false;   // the server has answered once: later failures are blips to wait out
  bool m_queued = false;    // we have (or had) a place in the queue: leave it when giving up
  bool m_step_now = false;  // the next wait step is a full one, without blocking first
  // The place in the queue: its arrival (the queue's score), when and for how long it was last
  // renewed, and whether the server may have lost it since (see carried()).
  std::string m_arrival;
  Clock::time_point m_renewed_at;
  Millis m_place_lease{0};
  bool m_place_lost = false;
  int m_steps_unchecked = 0;  // wait steps since the master was last asked for (follow_master)
  int m_position = 0;
  int m_contended_tries = 0;
  Clock::time_point m_full_at = Clock::now();  // when the last full step (or the first attempt) was sent
  Attempt m_a;
};

}  // namespace

Attempt take_lock(Backend& backend, const LockName& name, const WaitLimits& limits, const Contender& contender,
                  const std::vector<std::string>& enclosing_tokens, const WaitHooks& hooks) {
  return Taking(backend, name, limits, contender, enclosing_tokens, hooks).run();
}

}  // namespace rlock::lock
