// --min-hold: a used hold released before its minimum lingers with no process behind it, under a
// mark of its own, until its time or a release --force; a hold never used is given back at once.
#include "lock/history.hpp"
#include "protocol.hpp"

#include <algorithm>

namespace rlock::test {
namespace {

using LingerTest = ProtocolTest;

// A used hold's ending that lingers `linger` from the server's now (a run's release).
lock::Ending used_for(Millis linger) {
  lock::Ending e;
  e.exit_status = "0";
  e.used = true;
  e.linger = linger;
  return e;
}

std::vector<std::string> linger_kinds(lock::Backend& b, const LockName& name, size_t last) {
  std::vector<std::string> out;
  for (const auto& e : b.read_log(name, last, "")) out.push_back(e.kind);
  return out;
}

const lock::HolderState* holder_of(const LockState& s, const std::string& pid) {
  auto it =
      std::find_if(s.holders.begin(), s.holders.end(), [&](const lock::HolderState& h) { return h.holder.pid == pid; });
  return it == s.holders.end() ? nullptr : &*it;
}

TEST_F(LingerTest, AUsedHoldReleasedBeforeItsMinimumLingersUntilAForcedRelease) {
  auto b = backend();
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, name, timing, a.token, used_for(8s)));
  EXPECT_EQ(linger_kinds(*b, name, 1), std::vector<std::string>{"released"});
  EXPECT_EQ(call({"GET", name.lock_key()}).str, "~" + a.id()) << "the token is gone, its mark stays";

  LockState s = state();
  ASSERT_TRUE(s.held);
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_TRUE(s.holders[0].lingering);
  EXPECT_EQ(s.holders[0].holder.pid, "100");
  ASSERT_TRUE(s.holders[0].ttl_left_ms);
  EXPECT_GT(*s.holders[0].ttl_left_ms, 4'000);
  EXPECT_LE(*s.holders[0].ttl_left_ms, 8'000);

  Attempt busy = acquire(contender("101"), false);
  EXPECT_EQ(busy.outcome, Outcome::busy);
  EXPECT_TRUE(busy.lingering);
  EXPECT_EQ(busy.holder.pid, "100");
  ASSERT_TRUE(busy.ttl_left);
  EXPECT_GT(busy.ttl_left->count(), 4'000);
  EXPECT_LE(busy.ttl_left->count(), 8'000);
  EXPECT_FALSE(lock::extend(node, name, timing, a.token, std::nullopt)) << "nobody renews a lingering hold";

  lock::ForcedRelease forced = b->force_release(name);
  EXPECT_TRUE(forced.was_held);
  EXPECT_EQ(forced.holder.pid, "100");
  EXPECT_FALSE(state().held);
  EXPECT_EQ(call({"EXISTS", name.lock_key()}).integer, 0);
  EXPECT_EQ(acquire(contender("102"), false).outcome, Outcome::acquired);
}

TEST_F(LingerTest, AWaiterIsServedWhenTheLingerEnds) {
  constexpr Millis k_linger = 1s;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender w = contender("101");
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);

  auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(lock::release(node, name, timing, a.token, used_for(k_linger)));
  aw = step(w, aw, 20ms);
  ASSERT_EQ(aw.outcome, Outcome::queued) << "the release handed nothing on";
  EXPECT_TRUE(aw.lingering);
  EXPECT_EQ(aw.holder.pid, "100");
  ASSERT_TRUE(eventually([&] {
    aw = step(w, aw, 20ms);
    return aw.outcome != Outcome::queued;
  }));
  EXPECT_EQ(aw.outcome, Outcome::acquired);
  EXPECT_GE(since(released), k_linger - 50ms);
  EXPECT_LT(since(released), k_linger + 2s) << "served soon after the linger ends";
  LockState s = state();
  EXPECT_EQ(s.holders.at(0).holder.pid, "101");
  EXPECT_FALSE(s.holders.at(0).lingering);
}

TEST_F(LingerTest, AHoldNeverUsedIsReturnedAtOnceWhateverItsMinimum) {
  auto b = backend();
  Contender a = contender("100");
  a.min_hold = 60s;
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender w = contender("101");
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  lock::Ending never;  // used = false: a linger given with it means nothing
  never.linger = 8s;
  ASSERT_TRUE(lock::release(node, name, timing, a.token, never));
  EXPECT_EQ(step(w, aw).outcome, Outcome::acquired) << "handed on at once";
  EXPECT_EQ(linger_kinds(*b, name, 2), (std::vector<std::string>{"returned", "acquired"}));
}

TEST_F(LingerTest, AnAcquireHoldLingersUntilTheMinimumRecordedAtItsClaim) {
  constexpr Millis k_min_hold = 8s;
  constexpr Millis k_before_release = 500ms;
  Contender a = contender("100", Mode::exclusive, 1, 1s);
  a.min_hold = k_min_hold;
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  // The lease covers the minimum: a holder that dies keeps the lock so long.
  EXPECT_GT(*state().holders.at(0).ttl_left_ms, 4'000);
  std::this_thread::sleep_for(k_before_release);

  lock::Ending until_claimed_minimum;  // the release of an acquire hold: used, no linger of its own
  until_claimed_minimum.used = true;
  ASSERT_TRUE(lock::release(node, name, timing, a.token, until_claimed_minimum));
  LockState s = state();
  ASSERT_TRUE(s.held);
  EXPECT_TRUE(s.holders.at(0).lingering);
  ASSERT_TRUE(s.holders.at(0).ttl_left_ms);
  EXPECT_GT(*s.holders.at(0).ttl_left_ms, 2'000);
  EXPECT_LE(*s.holders.at(0).ttl_left_ms, (k_min_hold - k_before_release + 50ms).count())
      << "counted from the claim, not from the release";
  EXPECT_EQ(call({"GET", name.lock_key()}).str, "~" + a.id());

  // Without a minimum, the same release leaves nothing behind.
  LockName other{"rlock:", name.key + "-other"};
  Contender c = contender("200");
  ASSERT_EQ(lock::try_acquire(node, other, timing, c, false, {}).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, other, timing, c.token, until_claimed_minimum));
  EXPECT_FALSE(lock::inspect(node, other).held);
}

// A waiter's minimum counts from its claim (its step after the grant), not from the grant.
TEST_F(LingerTest, AGrantedWaitersMinimumCountsFromItsClaim) {
  constexpr Millis k_min_hold = 8s;
  constexpr Millis k_unclaimed = 1s;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender w = contender("101");
  w.min_hold = k_min_hold;
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  ASSERT_TRUE(release(a));
  std::this_thread::sleep_for(k_unclaimed);  // granted, not yet claimed (the claim window is long)
  ASSERT_EQ(step(w, aw).outcome, Outcome::acquired);

  lock::Ending until_claimed_minimum;
  until_claimed_minimum.used = true;
  ASSERT_TRUE(lock::release(node, name, timing, w.token, until_claimed_minimum));
  LockState s = state();
  ASSERT_TRUE(s.held);
  EXPECT_TRUE(s.holders.at(0).lingering);
  EXPECT_GT(*s.holders.at(0).ttl_left_ms, (k_min_hold - k_unclaimed / 2).count()) << "counted from the claim";
  EXPECT_LE(*s.holders.at(0).ttl_left_ms, k_min_hold.count());
}

TEST_F(LingerTest, ALingeringSemaphoreSlotIsKeptUntilItsTimeThenGivenToTheNext) {
  constexpr Millis k_linger = 1s;
  Contender a = contender("100", Mode::semaphore, 2);
  Contender b = contender("101", Mode::semaphore, 2);
  Attempt aa = acquire(a);
  ASSERT_EQ(aa.outcome, Outcome::acquired);
  ASSERT_EQ(acquire(b).outcome, Outcome::acquired);
  Contender c = contender("102", Mode::semaphore, 2);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.outcome, Outcome::queued);

  auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(lock::release(node, name, timing, a.token, used_for(k_linger)));
  LockState s = state();
  EXPECT_EQ(s.holder_count, 2);
  const lock::HolderState* lingering = holder_of(s, "100");
  ASSERT_NE(lingering, nullptr);
  EXPECT_TRUE(lingering->lingering);
  EXPECT_EQ(lingering->slot, aa.slot);
  EXPECT_LE(*lingering->ttl_left_ms, k_linger.count());
  ASSERT_NE(holder_of(s, "101"), nullptr);
  EXPECT_FALSE(holder_of(s, "101")->lingering);
  EXPECT_EQ(call({"HGET", name.key_of(lock::Part::holder_info), a.id() + ".t"}).str, "~" + a.id());
  EXPECT_EQ(step(c, ac, 20ms).outcome, Outcome::queued) << "the slot is still taken";

  ASSERT_TRUE(eventually([&] {
    ac = step(c, ac, 20ms);
    return ac.outcome != Outcome::queued;
  }));
  EXPECT_EQ(ac.outcome, Outcome::acquired);
  EXPECT_EQ(ac.slot, aa.slot);
  EXPECT_GE(since(released), k_linger - 50ms);
  EXPECT_EQ(holder_of(state(), "100"), nullptr);
}

TEST_F(LingerTest, ALingeringSharedHoldKeepsAWriterWaitingUntilAForcedRelease) {
  auto b = backend();
  Contender r1 = contender("100", Mode::shared);
  Contender r2 = contender("101", Mode::shared);
  ASSERT_EQ(acquire(r1).outcome, Outcome::acquired);
  ASSERT_EQ(acquire(r2).outcome, Outcome::acquired);
  Contender w = contender("200");
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);

  ASSERT_TRUE(lock::release(node, name, timing, r1.token, used_for(8s)));
  ASSERT_TRUE(release(r2));
  LockState s = state();
  EXPECT_EQ(s.holder_count, 1);
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_EQ(s.holders[0].holder.pid, "100");
  EXPECT_TRUE(s.holders[0].shared);
  EXPECT_TRUE(s.holders[0].lingering);
  EXPECT_GT(*s.holders[0].ttl_left_ms, 4'000);
  aw = step(w, aw, 20ms);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  EXPECT_TRUE(aw.lingering);

  lock::ForcedRelease forced = b->force_release(name);
  EXPECT_TRUE(forced.was_held);
  EXPECT_EQ(forced.shared_holds, 1);
  EXPECT_EQ(step(w, aw).outcome, Outcome::acquired);
}

TEST_F(LingerTest, ALingeringSharedHoldEndsAtItsTimeAndTheWriterIsServed) {
  constexpr Millis k_linger = 1s;
  Contender r = contender("100", Mode::shared);
  ASSERT_EQ(acquire(r).outcome, Outcome::acquired);
  Contender w = contender("200");
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);

  auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(lock::release(node, name, timing, r.token, used_for(k_linger)));
  LockState s = state();
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_TRUE(s.holders[0].shared);
  EXPECT_TRUE(s.holders[0].lingering);
  Attempt busy = acquire(contender("300"), false);
  EXPECT_EQ(busy.outcome, Outcome::busy);
  EXPECT_TRUE(busy.lingering);

  ASSERT_TRUE(eventually([&] {
    aw = step(w, aw, 20ms);
    return aw.outcome != Outcome::queued;
  }));
  EXPECT_EQ(aw.outcome, Outcome::acquired);
  EXPECT_GE(since(released), k_linger - 50ms);
  EXPECT_LT(since(released), k_linger + 2s);
  EXPECT_EQ(state().holders.at(0).holder.pid, "200");
}

}  // namespace
}  // namespace rlock::test
