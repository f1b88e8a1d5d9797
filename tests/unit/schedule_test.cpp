#include "lock/schedule.hpp"
#include "util/clock.hpp"
#include "fake_clock.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

using namespace std::chrono_literals;
using rlock::lock::Clock;
using rlock::lock::Schedule;
using rlock::util::Millis;
namespace validity = rlock::lock::validity;

namespace {

// Jitter sources: none, and the largest draw (the earliest renewal or retry).
uint64_t no_jitter(uint64_t) { return 0; }
uint64_t most_jitter(uint64_t bound) { return bound - 1; }

}  // namespace

TEST(Schedule, RenewsEveryThirdAndStopsBeforeTheDeadline) {
  FakeClock clock;
  Schedule s(clock.now, 30s, 5s, 2s, no_jitter);
  EXPECT_EQ(s.next_renewal() - clock.now, Millis(10'000));
  EXPECT_EQ(s.valid_until() - clock.now, Millis(30'000 - 302));
  EXPECT_EQ(s.kill_at() - clock.now, Millis(30'000 - 302 - 100));
  EXPECT_EQ(s.stop_at() - clock.now, Millis(30'000 - 302 - 100 - 5'000));
  clock.advance(10s);
  s.renewed(clock.now);
  EXPECT_EQ(s.next_renewal() - clock.now, Millis(10'000));
  EXPECT_EQ(s.valid_until() - clock.now, Millis(30'000 - 302));
}

TEST(Schedule, ASuspendPastTheDeadlineMeansStopAtOnce) {
  // The lease's clock counts a suspend (CLOCK_BOOTTIME): after a resume an hour later, the
  // deadline has passed, no renewal attempt gets any time, and the stop is due.
  FakeClock clock;
  Schedule s(clock.now, 30s, 5s, 2s);
  clock.advance(std::chrono::hours(1));
  EXPECT_GE(clock.now, s.stop_at());
  EXPECT_GE(clock.now, s.kill_at());
  EXPECT_EQ(s.attempt_budget(clock.now), Millis(0));
}

TEST(Schedule, ASuspendShorterThanTheMarginLeavesTheLeaseUsable) {
  FakeClock clock;
  Schedule s(clock.now, 30s, 5s, 2s);
  clock.advance(12s);  // suspended across the first renewal time
  EXPECT_GE(clock.now, s.next_renewal());
  EXPECT_LT(clock.now, s.stop_at());
  EXPECT_EQ(s.attempt_budget(clock.now), Millis(2'000));
}

TEST(Schedule, AttemptsNeverUseUpTheTimeBeforeTheStop) {
  // --io-timeout far above TTL/6: each attempt may wait at most half the time left, so a server
  // that never answers still leaves room for further attempts before the stop.
  for (Millis ttl : {Millis(300), Millis(3'000), Millis(30'000)}) {
    FakeClock clock;
    Millis kill_after = validity::max_kill_after(ttl);
    Schedule s(clock.now, ttl, kill_after, 60s);
    clock.now = s.next_renewal();
    int attempts = 0;
    while (clock.now < s.stop_at()) {
      Millis budget = s.attempt_budget(clock.now);
      ASSERT_GT(budget, Millis(0));
      ASSERT_LE(clock.now + budget, s.stop_at()) << ttl.count();
      ++attempts;
      clock.advance(budget);  // the server never answered
      s.failed(clock.now);
      clock.now = std::max(clock.now, s.next_renewal());
    }
    EXPECT_GE(attempts, 2) << ttl.count();
  }
}

TEST(Schedule, AFailedAttemptIsRetriedAtOnceThenOftenButNotPastTheStop) {
  FakeClock clock;
  Schedule s(clock.now, 3s, 1s, 2s, no_jitter);
  clock.now = s.next_renewal();
  // A blip costs nothing: the first retry goes at once, the next ones every retry_interval.
  s.failed(clock.now);
  EXPECT_EQ(s.next_renewal(), clock.now);
  s.failed(clock.now);
  EXPECT_EQ(s.next_renewal() - clock.now, validity::retry_interval(3s));
  clock.now = s.stop_at() - 1ms;
  s.failed(clock.now);
  EXPECT_LE(s.next_renewal(), s.stop_at());
  // A success starts over: the next failure is retried at once again.
  s.renewed(clock.now);
  clock.now = s.next_renewal();
  s.failed(clock.now);
  EXPECT_EQ(s.next_renewal(), clock.now);
}

TEST(Schedule, RenewalsAndRetriesAreJitteredEarlierOnly) {
  // The bounds: a renewal is due between TTL/3 - TTL/30 and TTL/3 after the last one was sent; a
  // retry after the first is due between half a retry interval and a whole one. Never later than
  // without jitter, so every deadline holds as before.
  for (Millis ttl : {Millis(100), Millis(3'000), Millis(30'000), Millis(600'000)}) {
    FakeClock clock;
    Schedule earliest(clock.now, ttl, validity::max_kill_after(ttl), 2s, most_jitter);
    EXPECT_EQ(earliest.next_renewal() - clock.now, validity::renew_interval(ttl) - validity::renew_jitter(ttl));
    EXPECT_GE(earliest.next_renewal() - clock.now, ttl * 3 / 10 - Millis(1)) << ttl.count();
    earliest.failed(clock.now);
    EXPECT_EQ(earliest.next_renewal(), clock.now) << "the first retry still goes at once";
    earliest.failed(clock.now);
    Millis retry = validity::retry_interval(ttl);
    EXPECT_EQ(earliest.next_renewal() - clock.now, retry - retry / 2);
    for (int i = 0; i < 200; ++i) {
      Schedule s(clock.now, ttl, validity::max_kill_after(ttl), 2s);
      EXPECT_LE(s.next_renewal() - clock.now, validity::renew_interval(ttl));
      EXPECT_GE(s.next_renewal() - clock.now, validity::renew_interval(ttl) - validity::renew_jitter(ttl));
      EXPECT_LT(s.next_renewal(), s.stop_at());
      s.failed(clock.now);
      s.failed(clock.now);
      EXPECT_LE(s.next_renewal() - clock.now, retry);
      EXPECT_GE(s.next_renewal() - clock.now, retry - retry / 2);
    }
  }
}

TEST(Schedule, HoldersStartedTogetherDriftOutOfPhase) {
  // A fleet started by one timer: 100 holders take their leases in the same millisecond and
  // each renews when due (the renewal takes no time). After 10 renewals their next renewals
  // spread over more than a second, where without jitter they stay in the same instant.
  FakeClock clock;
  std::vector<Schedule> fleet;
  std::vector<Schedule> in_step;
  for (int i = 0; i < 100; ++i) {
    fleet.emplace_back(clock.now, 30s, 5s, 2s);
    in_step.emplace_back(clock.now, 30s, 5s, 2s, no_jitter);
  }
  for (int round = 0; round < 10; ++round) {
    for (Schedule& s : fleet) s.renewed(s.next_renewal());
    for (Schedule& s : in_step) s.renewed(s.next_renewal());
  }
  auto spread = [](const std::vector<Schedule>& v) {
    auto [lo, hi] = std::minmax_element(
        v.begin(), v.end(), [](const Schedule& a, const Schedule& b) { return a.next_renewal() < b.next_renewal(); });
    return std::chrono::duration_cast<Millis>(hi->next_renewal() - lo->next_renewal());
  };
  EXPECT_EQ(spread(in_step), Millis(0));
  // Each holder's drift is a sum of 10 uniform draws in [0, 1s] (mean 5s, deviation 0.9s): 100 of
  // them spread over less than 1s has a negligible chance.
  EXPECT_GT(spread(fleet), Millis(1'000));
  // And the fleet renews at least as often as without jitter: no renewal came later.
  for (const Schedule& s : fleet) EXPECT_LE(s.next_renewal(), in_step.front().next_renewal());
}

TEST(Schedule, ExpectedTtlLeftCountsFromTheLastRenewal) {
  // The server's TTL when a renewal arrives, had nothing shortened it: a forward step of the
  // server's clock shows as a shortfall against this.
  FakeClock clock;
  Schedule s(clock.now, 6s, 1s, 2s);
  clock.advance(2s);
  EXPECT_EQ(s.expected_ttl_left(clock.now), Millis(4'000));
  s.renewed(clock.now);
  clock.advance(500ms);
  EXPECT_EQ(s.expected_ttl_left(clock.now), Millis(5'500));
}

TEST(BootClock, IsMonotonicAndWaitsEndAtTheirDeadline) {
  auto a = rlock::util::BootClock::now();
  auto deadline = a + 30ms;
  EXPECT_EQ(rlock::util::poll_until(nullptr, 0, deadline), 0);
  auto b = rlock::util::BootClock::now();
  EXPECT_GE(b, deadline);
  EXPECT_LT(b - a, 2s);
}
