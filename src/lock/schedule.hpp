#pragma once

#include "lock/validity.hpp"
#include "util/random.hpp"

#include <optional>

namespace rlock::lock {

// When `run` renews, retries, starts the stop sequence and kills, for one lease: arithmetic on
// CLOCK_BOOTTIME time points only, so that tests drive it with a fake clock (a suspend is a jump
// of the time points).
//
//   sent ─── TTL/3 ──> renew ─ retries ─> stop_at ── kill_after ──> kill_at ─ guard ─> valid_until
//
// A renewal attempt may wait at most half the time left before stop_at (and never more than the
// I/O timeout), so that a slow or paused server always leaves room for another attempt before
// the child must be stopped, whatever --io-timeout says.
//
// Renewals and retries are jittered, so that holders started by one timer drift out of phase:
// a renewal is due TTL/3 less a random part of at most renew_jitter (TTL/30) after the last one
// was sent, and the retries after the first (which goes at once) wait between half a
// retry_interval and a whole one. Jitter only brings a renewal or a retry forward: none is ever
// later than without it.
class Schedule {
public:
  Schedule(Clock::time_point sent_at, util::Millis ttl, util::Millis kill_after, util::Millis io_timeout,
           util::RandomBelow random = util::random_below);

  // A renewal sent at sent_at succeeded.
  void renewed(Clock::time_point sent_at);
  // A renewal attempt failed (or did not count): retry at once the first time, then every half
  // to whole retry_interval.
  void failed(Clock::time_point now);

  Clock::time_point next_renewal() const { return m_next_renewal; }
  Clock::time_point valid_until() const { return m_deadline.valid_until(); }
  // The child's tree must have received SIGKILL by then (the guard's deadline).
  Clock::time_point kill_at() const { return m_deadline.kill_at(); }
  // The stop sequence (--signal, then SIGKILL after --kill-after) starts by then at the latest.
  Clock::time_point stop_at() const { return m_deadline.stop_at(m_kill_after); }
  // How long a renewal attempt starting at now may wait for Redis; zero when it is too late.
  util::Millis attempt_budget(Clock::time_point now) const;
  // How much TTL the server should still have had for this lease at now, had nothing shortened
  // it (a forward step of the server's clock does).
  util::Millis expected_ttl_left(Clock::time_point now) const;
  // When the lease was last confirmed (sent_at of the last success).
  Clock::time_point last_renewal() const { return m_last_sent; }

  // The smallest budget an attempt gets while there is time left at all.
  static constexpr util::Millis k_min_attempt{10};

private:
  util::Millis m_ttl;
  util::Millis m_kill_after;
  util::Millis m_io_timeout;
  util::RandomBelow m_random;
  Deadline m_deadline;
  Clock::time_point m_last_sent;
  Clock::time_point m_next_renewal;
  int m_failures = 0;  // failed attempts since the last renewal
};

}  // namespace rlock::lock
