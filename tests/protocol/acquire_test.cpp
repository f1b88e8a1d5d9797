// Acquire, release and extend on one server, read back through inspect.
#include "protocol.hpp"

namespace rlock::test {
namespace {

using AcquireTest = ProtocolTest;

TEST_F(AcquireTest, FreeLockIsTakenAndInspectShowsTheHolder) {
  Contender a = contender("101", Mode::exclusive, 1, 20s);
  Attempt got = acquire(a, false);
  ASSERT_EQ(got.outcome, Outcome::acquired);
  EXPECT_GT(got.fence, 0);

  LockState s = state();
  EXPECT_TRUE(s.held);
  EXPECT_EQ(s.mode, Mode::exclusive);
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_EQ(s.holder_count, 1);
  EXPECT_EQ(s.holders[0].holder.pid, "101");
  EXPECT_EQ(s.holders[0].holder.cmd, "cmd 101");
  EXPECT_EQ(s.holders[0].fence, got.fence);
  EXPECT_EQ(s.fence, got.fence);
  EXPECT_EQ(s.holders[0].lease_ms, 20'000);
  ASSERT_TRUE(s.holders[0].ttl_left_ms);
  EXPECT_GT(*s.holders[0].ttl_left_ms, 10'000);
  EXPECT_LE(*s.holders[0].ttl_left_ms, 20'000);
  EXPECT_FALSE(s.limit);
  EXPECT_EQ(s.queue_length, 0);
  EXPECT_TRUE(s.waiters.empty());
}

TEST_F(AcquireTest, HeldLockIsBusyWithoutQueueing) {
  Contender a = contender("101");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Attempt b = acquire(contender("102"), false);
  EXPECT_EQ(b.outcome, Outcome::busy);
  EXPECT_EQ(b.holder.pid, "101");
  ASSERT_TRUE(b.ttl_left);
  EXPECT_GT(b.ttl_left->count(), 0);
  EXPECT_EQ(b.queue_length, 0);
  EXPECT_EQ(state().queue_length, 0);
}

TEST_F(AcquireTest, ReleaseFreesTheLockOnceAndTheNextFenceIsHigher) {
  Contender a = contender("101");
  Attempt first = acquire(a);
  ASSERT_EQ(first.outcome, Outcome::acquired);
  EXPECT_TRUE(release(a));
  EXPECT_FALSE(state().held);
  EXPECT_FALSE(release(a)) << "a second release of the same token";

  Contender b = contender("102");
  Attempt second = acquire(b, false);
  ASSERT_EQ(second.outcome, Outcome::acquired);
  EXPECT_GT(second.fence, first.fence);
  EXPECT_FALSE(release(a)) << "a released token never releases another holder's lock";
  EXPECT_TRUE(state().held);
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
}

TEST_F(AcquireTest, AnAttemptRepeatedWithTheSameTokenIsOurs) {
  // An earlier attempt whose answer was lost took the lock: the retry finds it held by its token.
  Contender a = contender("101");
  Attempt first = acquire(a);
  Attempt again = acquire(a);
  ASSERT_EQ(again.outcome, Outcome::acquired);
  EXPECT_EQ(again.fence, first.fence);
}

TEST_F(AcquireTest, EnclosingHoldReentersTheLock) {
  Contender outer = contender("101");
  Attempt held = acquire(outer);
  ASSERT_EQ(held.outcome, Outcome::acquired);
  Contender inner = contender("102");
  Attempt in = lock::try_acquire(node, name, timing, inner, true, {lock::new_token(), outer.token});
  ASSERT_EQ(in.outcome, Outcome::reentered);
  EXPECT_EQ(in.fence, held.fence);
  EXPECT_EQ(in.enclosing, 1u);
  EXPECT_EQ(state().queue_length, 0);
}

TEST_F(AcquireTest, ExtendResetsTheLeaseOfItsHolderOnly) {
  Contender a = contender("101", Mode::exclusive, 1, 2s);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);

  std::optional<lock::Extension> e = lock::extend(node, name, timing, a.token, Millis(20'000));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ttl, 20'000ms);
  ASSERT_TRUE(e->ttl_left_before);
  EXPECT_LE(e->ttl_left_before->count(), 2'000);
  LockState s = state();
  EXPECT_GT(*s.holders.at(0).ttl_left_ms, 10'000);
  EXPECT_EQ(s.holders.at(0).lease_ms, 20'000);

  // Without a TTL: the one it was last given.
  e = lock::extend(node, name, timing, a.token, std::nullopt, {lock::KeeperInfo{4242, 4343}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ttl, 20'000ms);
  s = state();
  ASSERT_TRUE(s.holders.at(0).keeper);
  EXPECT_EQ(s.holders.at(0).keeper->keeper, 4242);
  EXPECT_EQ(s.holders.at(0).keeper->watched, 4343);

  EXPECT_FALSE(lock::extend(node, name, timing, lock::new_token(), Millis(20'000))) << "another token";
  ASSERT_TRUE(release(a));
  EXPECT_FALSE(lock::extend(node, name, timing, a.token, Millis(20'000))) << "after the release";
}

// A lease that recorded no TTL (its record lost the field) is extended by rlock's default TTL,
// which extend passes to the script.
TEST_F(AcquireTest, ExtendWithoutATtlOfALeaseThatRecordedNoneUsesTheDefault) {
  Contender a = contender("101", Mode::exclusive, 1, 2s);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_EQ(call({"HDEL", name.info_key(), "ttl"}).integer, 1);
  std::optional<lock::Extension> e = lock::extend(node, name, timing, a.token, std::nullopt);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ttl, lock::k_default_ttl);
  EXPECT_EQ(state().holders.at(0).lease_ms, lock::k_default_ttl.count());
}

TEST_F(AcquireTest, ALeaseThatRunsOutFreesTheLockAndItsHolderLosesIt) {
  Contender a = contender("101", Mode::exclusive, 1, 100ms);
  Attempt first = acquire(a);
  ASSERT_EQ(first.outcome, Outcome::acquired);
  Contender b = contender("102");
  ASSERT_TRUE(eventually([&] { return acquire(b, false).outcome == Outcome::acquired; }));
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
  EXPECT_FALSE(lock::extend(node, name, timing, a.token, std::nullopt));
  EXPECT_FALSE(release(a));
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
}

TEST_F(AcquireTest, ForeignDataAtTheLockIsRefused) {
  call({"HSET", name.lock_key(), "f", "v"});
  try {
    acquire(contender("101"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 65);
  }
}

TEST_F(AcquireTest, AnExclusiveHoldInsideASharedOneOfTheSameTreeIsRefused) {
  Contender outer = contender("100", Mode::shared);
  ASSERT_EQ(acquire(outer).outcome, Outcome::acquired);
  try {
    lock::try_acquire(node, name, timing, contender("101"), true, {outer.token});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 64);
  }
  Attempt inner = lock::try_acquire(node, name, timing, contender("102", Mode::shared), true, {outer.token});
  EXPECT_EQ(inner.outcome, Outcome::reentered);
}

}  // namespace
}  // namespace rlock::test
