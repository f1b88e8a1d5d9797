// take_lock (the waiting algorithm of run and acquire) and lock::renew (their renewal step)
// through the Backend of one server.
#include "lock/renewal.hpp"
#include "lock/schedule.hpp"
#include "lock/take.hpp"
#include "protocol.hpp"

#include <algorithm>
#include <future>
#include <mutex>

namespace rlock::test {
namespace {

using TakeTest = ProtocolTest;

lock::WaitHooks hooks(std::vector<int>* positions = nullptr, std::mutex* m = nullptr) {
  lock::WaitHooks h;
  h.pause = [](Millis d) {
    std::this_thread::sleep_for(d);
    return true;
  };
  h.interrupted = [] { return false; };
  h.progress = [positions, m](const Attempt& a, Millis) {
    if (!positions) return;
    std::lock_guard<std::mutex> guard(*m);
    positions->push_back(a.position);
  };
  return h;
}

lock::WaitLimits wait_for(std::optional<Millis> wait) {
  lock::WaitLimits l;
  l.wait = wait;
  return l;
}

TEST_F(TakeTest, TakesAFreeLockAtOnce) {
  auto b = backend();
  Attempt got = lock::take_lock(*b, name, wait_for(0ms), contender("100"), {}, hooks());
  EXPECT_EQ(got.outcome, Outcome::acquired);
  EXPECT_EQ(state().holders.at(0).holder.pid, "100");
}

TEST_F(TakeTest, WaitsInTheQueueUntilTheHolderReleases) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  std::vector<int> positions;
  std::mutex m;
  auto waiter = std::async(std::launch::async, [&] {
    auto b = backend();
    return lock::take_lock(*b, name, wait_for(20s), contender("101"), {}, hooks(&positions, &m));
  });
  ASSERT_TRUE(eventually([&] { return state().queue_length == 1; }));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> guard(m);
    return positions.size() >= 3;
  })) << "it goes on waiting, step after step";
  ASSERT_TRUE(release(a));
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(waiter.get().outcome, Outcome::acquired);
  EXPECT_EQ(state().holders.at(0).holder.pid, "101");
  EXPECT_EQ(state().queue_length, 0);
  std::lock_guard<std::mutex> guard(m);
  for (int p : positions) EXPECT_EQ(p, 1);
}

TEST_F(TakeTest, NoWaitIsBusyAndNeverQueues) {
  ASSERT_EQ(acquire(contender("100")).outcome, Outcome::acquired);
  auto b = backend();
  auto start = std::chrono::steady_clock::now();
  Attempt got = lock::take_lock(*b, name, wait_for(0ms), contender("101"), {}, hooks());
  EXPECT_EQ(got.outcome, Outcome::busy);
  EXPECT_EQ(got.holder.pid, "100");
  EXPECT_LT(since(start), 3s);
  EXPECT_EQ(state().queue_length, 0);
}

TEST_F(TakeTest, NoWaitWithAWaiterQueuedLeavesNoTraceAndTheWaiterIsServedAtTheRelease) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender w = contender("101");
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  auto keys = [&] {
    std::vector<std::string> k;
    for (const redis::Reply& e : call({"KEYS", "*"}).elements) k.push_back(e.str);
    std::sort(k.begin(), k.end());
    return k;
  };
  auto queue = [&] {
    std::vector<std::string> q;
    for (const redis::Reply& e : call({"ZRANGE", name.key_of(lock::Part::queue), "0", "-1", "WITHSCORES"}).elements)
      q.push_back(e.str);
    return q;
  };
  const std::vector<std::string> keys_before = keys();
  const std::vector<std::string> queue_before = queue();
  ASSERT_EQ(queue_before.size(), 2u);

  auto b = backend();
  for (int i = 0; i < 3; ++i) {
    Attempt got = lock::take_lock(*b, name, wait_for(0ms), contender("102"), {}, hooks());
    EXPECT_EQ(got.outcome, Outcome::busy);
    EXPECT_EQ(got.holder.pid, "100");
  }
  EXPECT_EQ(keys(), keys_before);
  EXPECT_EQ(queue(), queue_before);
  LockState s = state();
  EXPECT_EQ(s.queue_length, 1);
  ASSERT_EQ(s.waiters.size(), 1u);
  EXPECT_EQ(s.waiters.at(0).holder.pid, "101");

  // The waiter is not delayed: the release wakes it (a heartbeat far longer than the bound).
  ASSERT_TRUE(release(a));
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(step(w, aw, 8s).outcome, Outcome::acquired);
  EXPECT_LT(since(start), 3s);
  EXPECT_EQ(state().holders.at(0).holder.pid, "101");
}

// A wait that runs out with another waiter behind it: it leaves its place at once, and the one
// behind, now first, is served at the release, not at a later heartbeat.
TEST_F(TakeTest, AWaitThatRunsOutLeavesTheQueueAndTheOneBehindIsServedAtTheRelease) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  auto start = std::chrono::steady_clock::now();
  auto leaving = std::async(std::launch::async, [&] {
    auto b = backend();
    return lock::take_lock(*b, name, wait_for(500ms), contender("101"), {}, hooks());
  });
  ASSERT_TRUE(eventually([&] { return state().queue_length == 1; }));
  Contender behind = contender("102");
  Attempt ab = acquire(behind);
  ASSERT_EQ(ab.outcome, Outcome::queued);
  ASSERT_EQ(ab.position, 2) << "behind the one whose wait runs out";

  ASSERT_EQ(leaving.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(leaving.get().outcome, Outcome::busy);
  EXPECT_GE(since(start), 490ms);
  EXPECT_LT(since(start), 5s);
  LockState s = state();
  EXPECT_EQ(s.queue_length, 1) << "it left its place";
  ASSERT_EQ(s.waiters.size(), 1u);
  EXPECT_EQ(s.waiters.at(0).holder.pid, "102");
  EXPECT_EQ(s.waiters.at(0).position, 1);

  // The one behind is not delayed: the release wakes it (a heartbeat far longer than the bound).
  ASSERT_TRUE(release(a));
  auto released = std::chrono::steady_clock::now();
  EXPECT_EQ(step(behind, ab, 8s).outcome, Outcome::acquired);
  EXPECT_LT(since(released), 3s);
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
}

TEST_F(TakeTest, ANewerSupersedingRequestEndsTheWait) {
  ASSERT_EQ(acquire(contender("100")).outcome, Outcome::acquired);
  Contender old = contender("101");
  old.supersede = true;
  auto waiter = std::async(std::launch::async, [&] {
    auto b = backend();
    return lock::take_lock(*b, name, wait_for(20s), old, {}, hooks());
  });
  ASSERT_TRUE(eventually([&] { return state().queue_length == 1; }));
  Contender newer = contender("102");
  newer.supersede = true;
  ASSERT_EQ(acquire(newer).outcome, Outcome::queued);
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  Attempt got = waiter.get();
  EXPECT_EQ(got.outcome, Outcome::superseded);
  EXPECT_EQ(got.superseded_by.pid, "102");
  ASSERT_EQ(state().waiters.size(), 1u);
  EXPECT_EQ(state().waiters.at(0).holder.pid, "102");
}

TEST_F(TakeTest, RenewResetsTheLeaseUntilTheLockIsLost) {
  auto b = backend();
  Contender c = contender("100", Mode::exclusive, 1, 1s);
  Attempt got = lock::take_lock(*b, name, wait_for(0ms), c, {}, hooks());
  ASSERT_EQ(got.outcome, Outcome::acquired);
  lock::Schedule schedule(got.sent_at, c.ttl, 100ms, 2s);
  lock::HeldLease hold{name, c.token, c.ttl, got.fence, lock::KeeperInfo{77, 78}};

  std::this_thread::sleep_for(50ms);
  auto before = util::BootClock::now();
  lock::Renewal r = lock::renew(*b, schedule, hold);
  ASSERT_EQ(r.outcome, lock::Renewal::Outcome::renewed) << r.error;
  ASSERT_TRUE(r.extension);
  EXPECT_EQ(r.extension->ttl, 1s);
  EXPECT_LT(*r.extension->ttl_left_before, 1s);
  EXPECT_GE(schedule.last_renewal(), before) << "the schedule counts from the renewal";
  EXPECT_GT(schedule.next_renewal(), before);
  LockState s = state();
  EXPECT_EQ(s.holders.at(0).keeper->keeper, 77);
  EXPECT_GT(*s.holders.at(0).ttl_left_ms, 500) << "renewed to 1s, read back at once (slack for a loaded machine)";

  ASSERT_TRUE(b->force_release(name).was_held);
  r = lock::renew(*b, schedule, hold);
  EXPECT_EQ(r.outcome, lock::Renewal::Outcome::lost);
  EXPECT_FALSE(r.extension);
}

TEST_F(TakeTest, RenewOfAServerThatDoesNotAnswerFailsAndIsRetried) {
  lock::Servers servers = servers_of({"redis://127.0.0.1:" + std::to_string(unused_port())});
  auto b = lock::single_backend(servers, timing);
  Contender c = contender("100", Mode::exclusive, 1, 3s);
  auto sent = util::BootClock::now();
  lock::Schedule schedule(sent, c.ttl, 100ms, 2s);
  lock::HeldLease hold{name, c.token, c.ttl, 1, std::nullopt};
  lock::Renewal r = lock::renew(*b, schedule, hold);
  EXPECT_EQ(r.outcome, lock::Renewal::Outcome::failed);
  EXPECT_FALSE(r.error.empty());
  EXPECT_EQ(schedule.last_renewal(), sent) << "a failure is not counted";
  EXPECT_LE(schedule.next_renewal(), util::BootClock::now() + 1ms) << "the first retry is at once";
}

}  // namespace
}  // namespace rlock::test
