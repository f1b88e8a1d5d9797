#include "lock/backoff.hpp"
#include "lock/validity.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;
using rlock::lock::Clock;
using rlock::lock::Deadline;
using rlock::util::Millis;
namespace validity = rlock::lock::validity;

TEST(Validity, DeadlineCountsFromWhenTheRequestWasSent) {
  Clock::time_point sent{};
  Deadline d(sent, 30s);
  // 30s minus 1% drift minus 2ms.
  EXPECT_EQ(d.valid_until() - sent, Millis(30'000 - 300 - 2));
  EXPECT_EQ(d.valid_until() - d.kill_at(), Millis(100));
  EXPECT_EQ(d.kill_at() - d.stop_at(5s), Millis(5'000));
}

TEST(Validity, RenewalMovesTheDeadline) {
  Clock::time_point sent{};
  Deadline d(sent, 3s);
  d.renewed(sent + 1s);
  EXPECT_EQ(d.valid_until() - sent, Millis(1'000 + 3'000 - 30 - 2));
}

TEST(Validity, KillAlwaysLandsBeforeTheDeadline) {
  for (Millis ttl : {Millis(100), Millis(300), Millis(1'000), Millis(3'000), Millis(30'000), Millis(3'600'000)}) {
    Clock::time_point sent{};
    Deadline d(sent, ttl);
    Millis kill_after = validity::max_kill_after(ttl);
    ASSERT_GT(kill_after.count(), 0) << ttl.count();
    // The stop starts after the first renewal, leaving time to retry it...
    EXPECT_GT(d.stop_at(kill_after), sent + validity::renew_interval(ttl)) << ttl.count();
    // ...and the SIGKILL lands strictly before the lease can expire on the server.
    EXPECT_LT(d.kill_at(), sent + ttl) << ttl.count();
    EXPECT_LE(d.stop_at(kill_after) + kill_after, d.valid_until()) << ttl.count();
  }
}

TEST(Validity, Intervals) {
  EXPECT_EQ(validity::renew_interval(30s), Millis(10'000));
  EXPECT_EQ(validity::retry_interval(30s), Millis(250));
  EXPECT_EQ(validity::retry_interval(3s), Millis(50));
  EXPECT_EQ(validity::retry_interval(Millis(100)), Millis(10));
  EXPECT_EQ(validity::max_kill_after(30s), Millis(15'000 - 302 - 100));
  EXPECT_EQ(validity::max_kill_after(3s), Millis(1'500 - 32 - 100));
}

TEST(Backoff, GrowsCapsAndHonoursTheHoldersTtl) {
  rlock::lock::Backoff b;
  Millis first = b.next(std::nullopt);
  EXPECT_GE(first, Millis(7));
  EXPECT_LE(first, Millis(13));
  Millis last{};
  for (int i = 0; i < 30; ++i) last = b.next(std::nullopt);
  EXPECT_GE(last, Millis(375));
  EXPECT_LE(last, Millis(625));
  // A lock expiring in 20ms is retried just after, not 500ms later.
  EXPECT_LE(b.next(Millis(20)), Millis(27));
}
