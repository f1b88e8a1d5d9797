// Shared holds and semaphores (--shared, --limit N), read back through inspect.
#include "protocol.hpp"

#include <algorithm>
#include <set>

namespace rlock::test {
namespace {

using ModesTest = ProtocolTest;

TEST_F(ModesTest, ManySharedHoldersAndAnExclusiveWaiterBehindThem) {
  std::vector<Contender> readers;
  std::set<int64_t> fences;
  for (int i = 0; i < 5; ++i) {
    readers.push_back(contender(std::to_string(100 + i), Mode::shared));
    Attempt got = acquire(readers.back());
    ASSERT_EQ(got.outcome, Outcome::acquired) << "reader " << i;
    fences.insert(got.fence);
  }
  EXPECT_EQ(fences.size(), 5u) << "each hold has a fence of its own";

  Contender writer = contender("200");
  Attempt aw = acquire(writer);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  EXPECT_EQ(aw.position, 1);
  EXPECT_EQ(aw.watch.size(), 5u) << "the head watches every holder";
  // A reader arriving now does not jump the writer.
  Contender late = contender("300", Mode::shared);
  Attempt al = acquire(late);
  ASSERT_EQ(al.outcome, Outcome::queued);
  EXPECT_EQ(al.position, 2);

  LockState s = state();
  EXPECT_TRUE(s.held);
  EXPECT_EQ(s.mode, Mode::shared);
  EXPECT_EQ(s.holder_count, 5);
  ASSERT_EQ(s.holders.size(), 5u);
  std::set<std::string> pids;
  for (const auto& h : s.holders) {
    EXPECT_TRUE(h.shared);
    EXPECT_EQ(h.slot, 0);
    EXPECT_GT(*h.ttl_left_ms, 10'000);
    pids.insert(h.holder.pid);
  }
  EXPECT_EQ(pids, (std::set<std::string>{"100", "101", "102", "103", "104"}));
  EXPECT_FALSE(s.limit);
  ASSERT_EQ(s.waiters.size(), 2u);
  EXPECT_FALSE(s.waiters[0].shared);
  EXPECT_TRUE(s.waiters[1].shared);
  EXPECT_EQ(state(3).holders.size(), 3u) << "inspect reads at most the number asked";
  EXPECT_EQ(state(3).holder_count, 5);

  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(release(readers[static_cast<size_t>(i)]));
    aw = step(writer, aw);
    ASSERT_EQ(aw.outcome, Outcome::queued) << "still " << 4 - i << " reader(s)";
  }
  ASSERT_TRUE(release(readers[4]));
  ASSERT_EQ(step(writer, aw).outcome, Outcome::acquired);
  s = state();
  EXPECT_EQ(s.mode, Mode::exclusive);
  EXPECT_EQ(s.holders.at(0).holder.pid, "200");

  ASSERT_TRUE(release(writer));
  EXPECT_EQ(step(late, al).outcome, Outcome::acquired);
}

TEST_F(ModesTest, ARunOfSharedWaitersIsGrantedTogether) {
  Contender writer = contender("200");
  ASSERT_EQ(acquire(writer).outcome, Outcome::acquired);
  std::vector<Contender> readers;
  std::vector<Attempt> at;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(contender(std::to_string(100 + i), Mode::shared));
    at.push_back(acquire(readers.back()));
    ASSERT_EQ(at.back().outcome, Outcome::queued);
  }
  Contender writer2 = contender("201");
  Attempt aw2 = acquire(writer2);
  ASSERT_TRUE(release(writer));
  LockState s = state();
  EXPECT_EQ(s.holder_count, 3) << "the three readers are granted at once";
  ASSERT_EQ(s.waiters.size(), 1u);
  EXPECT_EQ(s.waiters[0].holder.pid, "201");
  for (size_t i = 0; i < readers.size(); ++i) EXPECT_EQ(step(readers[i], at[i]).outcome, Outcome::acquired);
  EXPECT_EQ(step(writer2, aw2).outcome, Outcome::queued);
}

TEST_F(ModesTest, ASemaphoreHasNHoldersWithSlotsOneToN) {
  std::vector<Contender> holders;
  std::set<int> slots;
  for (int i = 0; i < 3; ++i) {
    holders.push_back(contender(std::to_string(100 + i), Mode::semaphore, 3));
    Attempt got = acquire(holders.back());
    ASSERT_EQ(got.outcome, Outcome::acquired);
    slots.insert(got.slot);
  }
  EXPECT_EQ(slots, (std::set<int>{1, 2, 3}));
  Contender fourth = contender("103", Mode::semaphore, 3);
  Attempt a4 = acquire(fourth);
  ASSERT_EQ(a4.outcome, Outcome::queued);
  EXPECT_EQ(a4.position, 1);
  EXPECT_EQ(acquire(contender("104", Mode::semaphore, 3), false).outcome, Outcome::busy);

  LockState s = state();
  EXPECT_TRUE(s.held);
  EXPECT_EQ(s.mode, Mode::semaphore);
  EXPECT_EQ(s.limit, 3);
  EXPECT_EQ(s.holder_count, 3);
  ASSERT_EQ(s.holders.size(), 3u);
  std::set<int> shown;
  for (const auto& h : s.holders) {
    EXPECT_FALSE(h.shared);
    shown.insert(h.slot);
  }
  EXPECT_EQ(shown, slots);
  EXPECT_EQ(s.queue_length, 1);

  // The slot given back is the next holder's.
  auto second = std::find_if(s.holders.begin(), s.holders.end(), [](const auto& h) { return h.slot == 2; });
  ASSERT_NE(second, s.holders.end());
  const std::string pid = second->holder.pid;
  auto it = std::find_if(holders.begin(), holders.end(), [&](const Contender& c) { return c.holder.pid == pid; });
  ASSERT_TRUE(release(*it));
  Attempt got = step(fourth, a4);
  ASSERT_EQ(got.outcome, Outcome::acquired);
  EXPECT_EQ(got.slot, 2);
  EXPECT_EQ(state().holder_count, 3);

  // Once nobody holds or waits, the limit is forgotten.
  for (const Contender& c : holders) release(c);
  release(fourth);
  EXPECT_FALSE(state().held);
  EXPECT_FALSE(state().limit);
  EXPECT_EQ(acquire(contender("105"), false).outcome, Outcome::acquired);
}

// A semaphore's keys (its limit, the slots given back) expire with its holders and waiters,
// through the calls that create them, the queue's steps and the grants.
TEST_F(ModesTest, ASemaphoresKeysKeepAnExpiry) {
  const std::string sem = name.key_of(lock::Part::semaphore);
  const std::string free_slots = name.key_of(lock::Part::free_slots);
  auto expires = [this](const std::string& key) { return call({"PTTL", key}).integer > 0; };
  // A notice that nobody came for: the lock is not quiet, and the first holder's call finds no
  // semaphore before it creates it.
  call({"ZADD", name.key_of(lock::Part::notices), "99999999999999", "0000000000000000"});
  Contender a = contender("100", Mode::semaphore, 2);
  Contender b = contender("101", Mode::semaphore, 2);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  EXPECT_TRUE(expires(sem));
  ASSERT_EQ(acquire(b).outcome, Outcome::acquired);
  EXPECT_TRUE(expires(sem));
  Contender c = contender("102", Mode::semaphore, 2);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.outcome, Outcome::queued);
  call({"PERSIST", sem});
  ASSERT_EQ(fresh_step(c, ac).outcome, Outcome::queued);
  EXPECT_TRUE(expires(sem)) << "a full wait step sets it again";
  // A slot given back with nobody to take it (the waiter left first): :free appears, with an expiry.
  lock::cancel(node, name, timing, c.token, false);
  call({"PERSIST", sem});
  ASSERT_TRUE(release(a));
  EXPECT_EQ(call({"EXISTS", free_slots}).integer, 1);
  EXPECT_TRUE(expires(free_slots));
  EXPECT_TRUE(expires(sem));
}

TEST_F(ModesTest, HoldersMustAgreeOnTheKindOfHold) {
  ASSERT_EQ(acquire(contender("100", Mode::semaphore, 3)).outcome, Outcome::acquired);
  auto code_of = [&](const Contender& c) {
    try {
      acquire(c);
    } catch (const Error& e) {
      return e.exit_code();
    }
    return 0;
  };
  EXPECT_EQ(code_of(contender("101", Mode::semaphore, 4)), 65);
  EXPECT_EQ(code_of(contender("102")), 65);
  EXPECT_EQ(code_of(contender("103", Mode::shared)), 65);
  EXPECT_EQ(state().holder_count, 1);
  EXPECT_EQ(state().queue_length, 0);
}

TEST_F(ModesTest, ASharedHoldThatIsNotRenewedLapses) {
  Contender r = contender("100", Mode::shared, 1, 100ms);
  ASSERT_EQ(acquire(r).outcome, Outcome::acquired);
  Contender w = contender("200");
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  ASSERT_TRUE(eventually([&] {
    aw = step(w, aw, 20ms);
    return aw.outcome == Outcome::acquired;
  }));
  EXPECT_FALSE(lock::extend(node, name, timing, r.token, std::nullopt));
  EXPECT_FALSE(release(r));
}

TEST_F(ModesTest, ExtendResetsASharedLease) {
  Contender r = contender("100", Mode::shared, 1, 2s);
  ASSERT_EQ(acquire(r).outcome, Outcome::acquired);
  auto e = lock::extend(node, name, timing, r.token, Millis(20'000));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ttl, 20'000ms);
  EXPECT_LE(e->ttl_left_before->count(), 2'000);
  LockState s = state();
  EXPECT_GT(*s.holders.at(0).ttl_left_ms, 10'000);
  EXPECT_EQ(s.holders.at(0).lease_ms, 20'000);
}

TEST_F(ModesTest, ARunOfSharedWaitersLongerThanTheBudgetIsGrantedOverSeveralCalls) {
  Contender writer = contender("200");
  ASSERT_EQ(acquire(writer).outcome, Outcome::acquired);
  constexpr int k_readers = 45;  // more than two budgets (scripts/common/call.lua, BUDGET)
  std::vector<Contender> readers;
  std::vector<Attempt> at;
  for (int i = 0; i < k_readers; ++i) {
    readers.push_back(contender(std::to_string(100 + i), Mode::shared));
    at.push_back(acquire(readers.back()));
    ASSERT_EQ(at.back().position, i + 1);
  }
  ASSERT_TRUE(release(writer));
  LockState s = state();
  EXPECT_EQ(s.holder_count, k_readers) << "the release's further calls granted the rest of the run";
  EXPECT_EQ(s.queue_length, 0);
  // Each is woken at once: its own mailbox, or the one it watched, was pushed.
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < k_readers; ++i) {
    ASSERT_EQ(step(readers[static_cast<size_t>(i)], at[static_cast<size_t>(i)], 8s).outcome, Outcome::acquired)
        << "reader " << i;
  }
  EXPECT_LT(since(start), 5s);
}

TEST_F(ModesTest, AForcedReleaseRemovesEverySharedHoldABudgetAtATime) {
  constexpr int k_readers = 45;
  for (int i = 0; i < k_readers; ++i) {
    ASSERT_EQ(acquire(contender(std::to_string(100 + i), Mode::shared)).outcome, Outcome::acquired);
  }
  Contender writer = contender("200");
  Attempt aw = acquire(writer);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  lock::ForcedRelease forced = lock::force_release(node, name, timing);
  EXPECT_TRUE(forced.was_held);
  EXPECT_EQ(forced.shared_holds, k_readers);
  EXPECT_EQ(state().holder_count, 1) << "the writer was granted";
  EXPECT_EQ(state().holders.at(0).holder.pid, "200");
  EXPECT_EQ(step(writer, aw).outcome, Outcome::acquired);
}

TEST_F(ModesTest, ASemaphoreSlotOfAHolderThatDiedIsGivenToTheNext) {
  Contender dying = contender("100", Mode::semaphore, 2, 100ms);
  Contender other = contender("101", Mode::semaphore, 2);
  Attempt ad = acquire(dying);
  ASSERT_EQ(ad.outcome, Outcome::acquired);
  ASSERT_EQ(acquire(other).outcome, Outcome::acquired);
  Contender next = contender("102", Mode::semaphore, 2);
  Attempt an = acquire(next);
  ASSERT_EQ(an.outcome, Outcome::queued);
  ASSERT_TRUE(eventually([&] {
    an = step(next, an, 20ms);
    return an.outcome == Outcome::acquired;
  }));
  EXPECT_EQ(an.slot, ad.slot);
  EXPECT_EQ(state().holder_count, 2);
  EXPECT_FALSE(release(dying));
}

}  // namespace
}  // namespace rlock::test
