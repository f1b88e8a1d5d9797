// --once-per: the first hold of a tick records it with the lock, atomically; every other contender
// of that tick (or an earlier one) is refused with who ran it and when; a hold given back unused
// restores the record before it; a waiter granted after its tick was run leaves.
#include "lock/history.hpp"
#include "lock/take.hpp"
#include "protocol.hpp"

namespace rlock::test {
namespace {

using TickTest = ProtocolTest;

constexpr int64_t k_tick = 1'800'000'000'000;  // ms since the epoch: a multiple of 5 minutes
constexpr int64_t k_period = 300'000;

Contender on_host(const std::string& host, const std::string& pid, int64_t tick) {
  Contender c;
  c.token = lock::new_token();
  c.holder = {host, pid, "user", "job"};
  c.tick = tick;
  return c;
}

// The end of a hold whose command ran (a run's release).
lock::Ending used() {
  lock::Ending e;
  e.exit_status = "0";
  e.used = true;
  e.linger = Millis(0);
  return e;
}

TEST_F(TickTest, TheTickIsRecordedWithTheLock) {
  Contender a = on_host("host0", "100", k_tick);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  redis::Reply r = call({"HMGET", name.key_of(lock::Part::tick), "t", "h", "id"});
  ASSERT_EQ(r.elements.size(), 3u);
  EXPECT_EQ(r.elements[0].str, std::to_string(k_tick));
  EXPECT_EQ(r.elements[1].str, "host0");
  EXPECT_EQ(r.elements[2].str, a.id());
  EXPECT_GT(call({"PTTL", name.key_of(lock::Part::tick)}).integer, 0) << "it expires";
  EXPECT_EQ(call({"HGET", name.info_key(), "tk"}).str, std::to_string(k_tick));
}

TEST_F(TickTest, ARunWithoutOncePerWritesNoTick) {
  ASSERT_EQ(acquire(contender("100"), false).outcome, Outcome::acquired);
  EXPECT_EQ(call({"EXISTS", name.key_of(lock::Part::tick)}).integer, 0);
  EXPECT_EQ(call({"HEXISTS", name.info_key(), "tk"}).integer, 0);
}

TEST_F(TickTest, TheSameTickIsRefusedWithTheHostThatRanItAndWhen) {
  auto b = backend();
  Contender a = on_host("host0", "100", k_tick);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, name, timing, a.token, used()));
  ASSERT_FALSE(state().held) << "released: nothing lingers";

  for (int64_t tick : {k_tick, k_tick - k_period}) {
    for (bool queue : {false, true}) {
      Attempt done = acquire(on_host("host1", "200", tick), queue);
      EXPECT_EQ(done.outcome, Outcome::done) << "tick " << tick << (queue ? " with --wait" : " with -n");
      EXPECT_EQ(done.tick, k_tick);
      EXPECT_EQ(done.holder.host, "host0");
      EXPECT_GT(done.tick_at, 0);
      ASSERT_TRUE(done.held_for);
      EXPECT_GE(done.held_for->count(), 0);
      EXPECT_LT(done.held_for->count(), 10'000);
    }
  }
  EXPECT_FALSE(state().held) << "a refused contender takes nothing";
  EXPECT_EQ(state().queue_length, 0) << "nor a place in the queue";

  std::vector<lock::Event> events = b->read_log(name, 1, "");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "busy");
  EXPECT_EQ(events[0].holder.host, "host1");
  EXPECT_EQ(events[0].by, "host0");
  EXPECT_EQ(events[0].tick, k_tick);

  // The next tick runs.
  Contender next = on_host("host1", "201", k_tick + k_period);
  EXPECT_EQ(acquire(next, false).outcome, Outcome::acquired);
}

TEST_F(TickTest, AHoldOfTheTickIsRefusedWhileItRuns) {
  Contender a = on_host("host0", "100", k_tick);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  Attempt done = acquire(on_host("host1", "200", k_tick), true);
  EXPECT_EQ(done.outcome, Outcome::done) << "not queued behind the run of its own tick";
  EXPECT_EQ(done.holder.host, "host0");
  EXPECT_EQ(state().queue_length, 0);
  // The next tick's run finds the lock held: it waits (or skips with -n) as any other.
  EXPECT_EQ(acquire(on_host("host1", "201", k_tick + k_period), false).outcome, Outcome::busy);
  EXPECT_EQ(acquire(on_host("host1", "202", k_tick + k_period), true).outcome, Outcome::queued);
}

TEST_F(TickTest, AHoldGivenBackUnusedRestoresTheTickBefore) {
  Contender a = on_host("host0", "100", k_tick);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, name, timing, a.token, used()));

  // The next tick is taken, then given back without its command having started.
  Contender b = on_host("host1", "200", k_tick + k_period);
  ASSERT_EQ(acquire(b, false).outcome, Outcome::acquired);
  EXPECT_EQ(acquire(on_host("host2", "300", k_tick + k_period), false).outcome, Outcome::done);
  ASSERT_TRUE(release(b));  // Ending{}: never used, "returned"

  redis::Reply r = call({"HMGET", name.key_of(lock::Part::tick), "t", "h"});
  EXPECT_EQ(r.elements.at(0).str, std::to_string(k_tick)) << "the tick before is back";
  EXPECT_EQ(r.elements.at(1).str, "host0");
  Attempt old = acquire(on_host("host2", "301", k_tick), false);
  EXPECT_EQ(old.outcome, Outcome::done) << "the earlier tick stays done";
  EXPECT_EQ(old.holder.host, "host0");
  Contender c = on_host("host2", "302", k_tick + k_period);
  EXPECT_EQ(acquire(c, false).outcome, Outcome::acquired) << "its tick was not consumed";
  EXPECT_EQ(call({"HGET", name.key_of(lock::Part::tick), "h"}).str, "host2");
}

TEST_F(TickTest, TheFirstTickGivenBackLeavesNoRecord) {
  Contender a = on_host("host0", "100", k_tick);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(release(a));
  EXPECT_EQ(call({"EXISTS", name.key_of(lock::Part::tick)}).integer, 0);
  EXPECT_EQ(acquire(on_host("host1", "200", k_tick), false).outcome, Outcome::acquired);
}

TEST_F(TickTest, AUsedHoldKeepsItsTick) {
  Contender a = on_host("host0", "100", k_tick);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, name, timing, a.token, used()));
  EXPECT_EQ(acquire(on_host("host1", "200", k_tick), false).outcome, Outcome::done);
}

TEST_F(TickTest, AWaiterGrantedAfterItsTickWasRunLeavesAsDone) {
  // A run of the tick before holds the lock past the period; two hosts of the next tick wait.
  Contender old = on_host("host0", "100", k_tick - k_period);
  ASSERT_EQ(acquire(old, false).outcome, Outcome::acquired);
  Contender w1 = on_host("host1", "200", k_tick);
  Contender w2 = on_host("host2", "300", k_tick);
  Attempt a1 = acquire(w1);
  Attempt a2 = acquire(w2);
  ASSERT_EQ(a1.outcome, Outcome::queued);
  ASSERT_EQ(a2.outcome, Outcome::queued);

  // The first waiter is granted and claims: its tick is recorded at the claim.
  ASSERT_TRUE(lock::release(node, name, timing, old.token, used()));
  a1 = step(w1, a1);
  ASSERT_EQ(a1.outcome, Outcome::acquired);
  EXPECT_EQ(call({"HGET", name.key_of(lock::Part::tick), "t"}).str, std::to_string(k_tick));

  // The second is granted when it ends, and leaves at its claim: the tick is done.
  ASSERT_TRUE(lock::release(node, name, timing, w1.token, used()));
  EXPECT_EQ(state().holders.at(0).holder.host, "host2") << "granted, not yet claimed";
  Attempt late = step(w2, a2);
  EXPECT_EQ(late.outcome, Outcome::done);
  EXPECT_EQ(late.holder.host, "host1");
  EXPECT_EQ(late.tick, k_tick);
  EXPECT_EQ(call({"HGET", name.key_of(lock::Part::tick), "h"}).str, "host1") << "the record is untouched";
}

TEST_F(TickTest, AWaitingRunLeavesTheQueueAtItsNextStepOnceItsTickWasRun) {
  auto b = backend();
  Contender old = on_host("host0", "100", k_tick - k_period);
  ASSERT_EQ(acquire(old, false).outcome, Outcome::acquired);
  Contender w1 = on_host("host1", "200", k_tick);
  Contender w2 = on_host("host2", "300", k_tick);
  Contender w3 = on_host("host3", "400", k_tick + k_period);
  ASSERT_EQ(acquire(w1).outcome, Outcome::queued);
  ASSERT_EQ(acquire(w2).outcome, Outcome::queued);
  ASSERT_EQ(acquire(w3).outcome, Outcome::queued);
  ASSERT_TRUE(lock::release(node, name, timing, old.token, used()));

  lock::WaitLimits wait{Millis(5'000), 0, Millis(1'000)};
  lock::WaitHooks hooks{[](Millis d) {
                          std::this_thread::sleep_for(d);
                          return true;
                        },
                        [] { return false; },
                        {}};
  // w1, granted, claims it (through acquire, as a retry would): the tick is its.
  ASSERT_EQ(lock::take_lock(*b, name, wait, w1, {}, hooks).outcome, Outcome::acquired);
  // w2 does not wait for w1's run to end: its next step finds the tick run, and it leaves.
  auto start = std::chrono::steady_clock::now();
  Attempt left = lock::take_lock(*b, name, wait, w2, {}, hooks);
  EXPECT_EQ(left.outcome, Outcome::done);
  EXPECT_EQ(left.holder.host, "host1");
  EXPECT_LT(since(start).count(), 5'000);
  LockState s = state();
  EXPECT_EQ(s.holders.at(0).holder.host, "host1");
  EXPECT_EQ(s.queue_length, 1) << "w2 left the queue; the next tick's run waits on";
}

}  // namespace
}  // namespace rlock::test
