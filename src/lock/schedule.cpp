#include "schedule.hpp"

#include <algorithm>

namespace rlock::lock {

using util::Millis;

namespace {

// A random duration in [0, most].
Millis up_to(util::RandomBelow random, Millis most) {
  if (most <= Millis(0)) return Millis(0);
  return Millis(static_cast<int64_t>(random(static_cast<uint64_t>(most.count()) + 1)));
}

}  // namespace

Schedule::Schedule(Clock::time_point sent_at, Millis ttl, Millis kill_after, Millis io_timeout,
                   util::RandomBelow random)
    : m_ttl(ttl), m_kill_after(kill_after), m_io_timeout(io_timeout), m_random(random), m_deadline(sent_at, ttl) {
  renewed(sent_at);
}

void Schedule::renewed(Clock::time_point sent_at) {
  m_deadline.renewed(sent_at);
  m_last_sent = sent_at;
  m_next_renewal = sent_at + validity::renew_interval(m_ttl) - up_to(m_random, validity::renew_jitter(m_ttl));
  m_failures = 0;
}

void Schedule::failed(Clock::time_point now) {
  // A blip (a dropped connection, a failover) is retried at once, then often: whatever part of
  // the budget an outage leaves is used. The jitter spreads the retries of a fleet that lost the
  // same server, so that they do not all reach it in the same instant when it is back.
  Millis retry = validity::retry_interval(m_ttl);
  Millis pause = m_failures++ == 0 ? Millis(0) : retry - up_to(m_random, retry / 2);
  m_next_renewal = std::min(now + pause, std::max(now, stop_at()));
}

Millis Schedule::attempt_budget(Clock::time_point now) const {
  auto left = std::chrono::duration_cast<Millis>(stop_at() - now);
  if (left <= Millis(0)) return Millis(0);
  return std::min({m_io_timeout, std::max(left / 2, std::min(k_min_attempt, left))});
}

Millis Schedule::expected_ttl_left(Clock::time_point now) const {
  return m_ttl - std::chrono::duration_cast<Millis>(now - m_last_sent);
}

}  // namespace rlock::lock
