// Work in proportion to what is due: the uncontended calls touch only the keys they need, the
// heartbeat of a waiter behind others is a short step, and the bookkeeping still runs when
// something is due (a dead waiter reaped, a lapsed grant handed on, the queue's keys kept alive).
#include "protocol.hpp"

namespace rlock::test {
namespace {

using DueTest = ProtocolTest;

long long command_calls(const redis::Reply& info, const std::string& command) {
  std::string key = "cmdstat_" + command + ":calls=";
  size_t at = info.str.find(key);
  return at == std::string::npos ? 0 : std::stoll(info.str.substr(at + key.size()));
}

TEST_F(DueTest, AnUncontendedAcquireAndReleaseWalkNoQueue) {
  Contender a = contender("101");
  ASSERT_EQ(call({"CONFIG", "RESETSTAT"}).str, "OK");
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(release(a));
  redis::Reply info = call({"INFO", "commandstats"});
  // No scan of the queue, the leases, the holders or the notices; no expiries recomputed.
  EXPECT_EQ(command_calls(info, "zrangebyscore"), 0) << info.str;
  EXPECT_EQ(command_calls(info, "zrange"), 0) << info.str;
  EXPECT_EQ(command_calls(info, "zcard"), 0) << info.str;
  EXPECT_EQ(command_calls(info, "pexpireat"), 0) << info.str;
  EXPECT_EQ(command_calls(info, "lpush"), 0) << info.str;  // nobody waits: no mailbox pushed
  EXPECT_FALSE(state().held);
}

TEST_F(DueTest, ABusyAttemptReadsTheHolderAndWritesNoQueue) {
  Contender a = contender("101");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_EQ(call({"CONFIG", "RESETSTAT"}).str, "OK");
  Attempt b = acquire(contender("102"), false);
  ASSERT_EQ(b.outcome, Outcome::busy);
  EXPECT_EQ(b.holder.pid, "101");
  redis::Reply info = call({"INFO", "commandstats"});
  EXPECT_EQ(command_calls(info, "zrangebyscore") + command_calls(info, "zrange") + command_calls(info, "zcard"), 0)
      << info.str;
  EXPECT_EQ(call({"EXISTS", name.lock_key() + ":q", name.lock_key() + ":wl"}).integer, 0);
}

TEST_F(DueTest, HeartbeatsBehindOthersKeepThePlaceAndTheQueueKeysAlive) {
  Timing short_lease = timing;
  short_lease.lease = 300ms;
  short_lease.claim = 300ms;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  Attempt ab = acquire(b, true, &short_lease);
  Attempt ac = acquire(c, true, &short_lease);
  ASSERT_EQ(ac.position, 2);
  // Both keep stepping for several leases: neither is dropped, and the queue's keys stay.
  auto start = std::chrono::steady_clock::now();
  while (since(start) < 1500ms) {
    ab = step(b, ab, 20ms, &short_lease);
    ac = step(c, ac, 20ms, &short_lease);
    ASSERT_EQ(ab.outcome, Outcome::queued);
    ASSERT_EQ(ac.outcome, Outcome::queued);
    EXPECT_EQ(ac.position, 2);
    EXPECT_EQ(ac.watch, std::vector<std::string>{b.id()});
    EXPECT_EQ(ac.holder.pid, "100");
  }
  for (const char* part : {":q", ":wl", ":w"}) {
    int64_t ttl = call({"PTTL", name.lock_key() + part}).integer;
    EXPECT_GT(ttl, 300) << part;
  }
  EXPECT_EQ(state().queue_length, 2);
}

TEST_F(DueTest, ADeadWaiterAheadIsReapedByTheHeartbeatOfOneBehindIt) {
  Timing dying = timing;
  dying.lease = 500ms;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  Contender d = contender("103");
  ASSERT_EQ(acquire(b, true, &dying).outcome, Outcome::queued);
  ASSERT_EQ(acquire(c, true, &dying).outcome, Outcome::queued);
  Attempt ad = acquire(d);
  ASSERT_EQ(ad.position, 3);
  // b and c stop; d's heartbeats go on: once their leases ran out, one of d's steps drops them.
  std::string q = name.lock_key() + ":q";
  ASSERT_TRUE(eventually([&] {
    ad = step(d, ad, 20ms);
    return call({"ZCARD", q}).integer == 1;
  }));
  EXPECT_EQ(ad.position, 1);
  ASSERT_TRUE(release(a));
  EXPECT_EQ(step(d, ad, 5s).outcome, Outcome::acquired);
}

TEST_F(DueTest, ALapsedGrantIsHandedOnByTheNextWaitersHeartbeat) {
  Timing short_claim = timing;
  short_claim.claim = 300ms;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  ASSERT_EQ(acquire(b).outcome, Outcome::queued);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.position, 2);
  // a's release grants b (for the claim window), which never claims it.
  ASSERT_TRUE(lock::release(node, name, short_claim, a.token, lock::Ending{}));
  ASSERT_TRUE(eventually([&] {
    ac = step(c, ac, 20ms, &short_claim);
    return ac.outcome == Outcome::acquired;
  }));
  LockState s = state();
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_EQ(s.holders[0].holder.pid, "102");
}

}  // namespace
}  // namespace rlock::test
