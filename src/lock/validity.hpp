#pragma once

#include "util/clock.hpp"
#include "util/duration.hpp"

#include <chrono>

namespace rlock::lock {

using Clock = util::BootClock;

// The TTL of a lease when none is given (--ttl's default), and the one extend assumes for a lease
// that recorded none.
inline constexpr util::Millis k_default_ttl{30'000};

// The arithmetic of a lease held by `run`, on CLOCK_BOOTTIME (which counts a suspend).
//
// A lease taken or renewed by a request sent at time S is valid until S + TTL - drift: the server
// started its TTL no earlier than S, and drift covers the clock-rate difference between hosts
// (1% of the TTL, plus 2ms). The child must be gone before that deadline, so the stop sequence
// (the --signal, then SIGKILL after --kill-after) starts early enough that the SIGKILL lands
// `guard` before it.
namespace validity {

// Allowance for clock-rate drift between this host and the Redis server.
util::Millis drift(util::Millis ttl);
// How long before the deadline the SIGKILL lands.
util::Millis guard(util::Millis ttl);
// Time between renewals: TTL/3.
util::Millis renew_interval(util::Millis ttl);
// How much earlier than renew_interval a renewal may be sent, at most: TTL/30, a tenth of the
// interval. The jitter only brings renewals forward, so no deadline moves.
util::Millis renew_jitter(util::Millis ttl);
// Time between retries after a failed renewal (the longest; jittered down to half of it).
util::Millis retry_interval(util::Millis ttl);
// The longest --kill-after: the stop sequence then starts at TTL/2 after the last good renewal at
// the latest, which leaves TTL/6 after the first failed renewal (at TTL/3) for retries, and the
// SIGKILL still lands before the deadline.
util::Millis max_kill_after(util::Millis ttl);
// The smallest TTL rlock accepts.
inline constexpr util::Millis k_min_ttl{100};

}  // namespace validity

// The validity deadline of one lease.
class Deadline {
public:
  Deadline(Clock::time_point sent_at, util::Millis ttl) : m_ttl(ttl) { renewed(sent_at); }

  // A renewal sent at sent_at succeeded.
  void renewed(Clock::time_point sent_at) { m_valid_until = sent_at + m_ttl - validity::drift(m_ttl); }

  // The lease is surely valid before this instant.
  Clock::time_point valid_until() const { return m_valid_until; }
  // When the child must receive SIGKILL at the latest.
  Clock::time_point kill_at() const { return m_valid_until - validity::guard(m_ttl); }
  // When the stop sequence must start at the latest, with this --kill-after.
  Clock::time_point stop_at(util::Millis kill_after) const { return kill_at() - kill_after; }

private:
  util::Millis m_ttl;
  Clock::time_point m_valid_until;
};

}  // namespace rlock::lock
