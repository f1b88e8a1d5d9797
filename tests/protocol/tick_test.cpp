// --once-per: a contender's tick is when it fired, by the server's clock; two fire times less than
// half a period apart are one tick. A tick is pending while the hold that took the lock for it has
// not started its command (a contender of that tick then waits, or is busy with -n), and it ran
// once the holder marked it, right before its start (every run of that tick, or of an earlier one,
// is refused then). A pending tick goes with its hold; a marked one given back unused (its command
// proved not started) is put back, whether the hold still held the lock or not.
#include "lock/history.hpp"
#include "lock/take.hpp"
#include "protocol.hpp"

namespace rlock::test {
namespace {

using Clock = util::BootClock;

constexpr Millis k_period{300'000};

class TickTest : public ProtocolTest {
protected:
  // A run on host that fired `after` the test's start (a negative age for the scripts: it fires in
  // the future, as a later tick's run would), with --once-per period.
  Contender fired(const std::string& host, const std::string& pid, Millis after, Millis period = k_period,
                  Millis ttl = 30s) {
    Contender c = contender(pid, Mode::exclusive, 1, ttl);
    c.holder.host = host;
    c.once_per = Contender::OncePer{period, m_start + after};
    return c;
  }
  // The holder marks its tick run: its command starts now.
  bool mark(const Contender& c) {
    lock::ExtendNote note;
    note.tick_ran = true;
    return lock::extend(node, name, timing, c.token, std::nullopt, note).has_value();
  }
  // The end of a hold whose command ran (a run's release).
  bool finish(const Contender& c) {
    lock::Ending e;
    e.exit_status = "0";
    e.used = true;
    e.linger = Millis(0);
    return lock::release(node, name, timing, c.token, e);
  }
  std::string record(const std::string& field) { return call({"HGET", name.key_of(lock::Part::tick), field}).str; }
  bool recorded() { return call({"EXISTS", name.key_of(lock::Part::tick)}).integer == 1; }
  int64_t info_tick() { return std::stoll("0" + call({"HGET", name.info_key(), "tk"}).str); }

  Clock::time_point m_start = Clock::now();
};

TEST_F(TickTest, ATickIsPendingUntilItsHolderMarksItRun) {
  Contender a = fired("host0", "100", 0ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  EXPECT_FALSE(recorded()) << "taken, not run: nothing recorded beside the hold";
  EXPECT_GT(info_tick(), 0) << "the hold's own record says which tick it took";
  EXPECT_EQ(call({"HEXISTS", name.info_key(), "tr"}).integer, 0);

  // A run of the same tick, fired 2s later: a contender for a busy lock, not refused.
  Contender b = fired("host1", "200", 2s);
  Attempt busy = acquire(b, false);
  EXPECT_EQ(busy.outcome, Outcome::busy) << "-n: the ordinary busy answer";
  EXPECT_FALSE(busy.overrun) << "the holder took the same tick";
  Attempt queued = acquire(b, true);
  ASSERT_EQ(queued.outcome, Outcome::queued) << "--wait: it queues";

  ASSERT_TRUE(mark(a));
  EXPECT_EQ(record("t"), std::to_string(info_tick()));
  EXPECT_EQ(record("h"), "host0");
  EXPECT_EQ(record("id"), a.id());
  EXPECT_EQ(record("p"), std::to_string(k_period.count()));
  EXPECT_GT(call({"PTTL", name.key_of(lock::Part::tick)}).integer, 0) << "it expires";
  EXPECT_EQ(call({"HGET", name.info_key(), "tr"}).str, "1");
  EXPECT_TRUE(mark(a)) << "marked again (a renewal whose answer was lost): the same record";
  EXPECT_EQ(record("id"), a.id());

  // The waiter's next step finds the tick run: it leaves as done.
  Attempt done = step(b, queued);
  EXPECT_EQ(done.outcome, Outcome::done);
  EXPECT_EQ(done.holder.host, "host0");
  EXPECT_EQ(std::to_string(done.tick), record("t"));
  EXPECT_NEAR(static_cast<double>(done.own_tick - done.tick), 2'000.0, 500.0) << "its own tick: 2s after";
}

TEST_F(TickTest, ARunWithoutOncePerRecordsNoTick) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  lock::ExtendNote note;
  note.tick_ran = true;
  ASSERT_TRUE(lock::extend(node, name, timing, a.token, std::nullopt, note));
  EXPECT_FALSE(recorded());
  EXPECT_EQ(call({"HEXISTS", name.info_key(), "tk"}).integer, 0);
}

TEST_F(TickTest, APendingTickIsFreeAgainOnceItsHolderGivesItBack) {
  Contender a = fired("host0", "100", 0ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(release(a));  // Ending{}: never used (--wait-replicas not met, a signal...)
  Contender b = fired("host1", "200", 2s);
  EXPECT_EQ(acquire(b, false).outcome, Outcome::acquired) << "the same tick, free again";
}

TEST_F(TickTest, APendingTickIsFreeAgainOnceItsHoldersLeaseLapses) {
  // Its taker died between its grant and its start (SIGKILL, a host gone).
  Contender a = fired("host0", "100", 0ms, k_period, 150ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  Contender b = fired("host1", "200", 2s);
  ASSERT_TRUE(eventually([&] { return acquire(b, false).outcome == Outcome::acquired; }, 5s));
  ASSERT_TRUE(mark(b));
  EXPECT_EQ(record("h"), "host1");
}

TEST_F(TickTest, AWaiterOfTheSameTickIsServedOnceAPendingHoldersLeaseLapses) {
  // Its taker died between its grant and its start, while a run of the same tick waited.
  Contender a = fired("host0", "100", 0ms, k_period, 150ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  Contender b = fired("host1", "200", 1s);
  Attempt got = acquire(b);
  ASSERT_EQ(got.outcome, Outcome::queued);
  ASSERT_TRUE(eventually(
      [&] {
        got = fresh_step(b, got);
        return got.outcome != Outcome::queued;
      },
      5s));
  ASSERT_EQ(got.outcome, Outcome::acquired) << "the tick never ran: it is the waiter's";
  ASSERT_TRUE(mark(b));
  EXPECT_EQ(record("h"), "host1");
  ASSERT_TRUE(finish(b));
  EXPECT_EQ(acquire(fired("host2", "300", 2s), true).outcome, Outcome::done);
}

TEST_F(TickTest, AGiveBackHandsTheLockAndTheTickToAWaiterOfTheSameTick) {
  Contender a = fired("host0", "100", 0ms);
  Contender b = fired("host1", "200", 1s);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  Attempt waiting = acquire(b);
  ASSERT_EQ(waiting.outcome, Outcome::queued);
  ASSERT_TRUE(release(a));  // never used
  Attempt got = step(b, waiting);
  ASSERT_EQ(got.outcome, Outcome::acquired);
  ASSERT_TRUE(mark(b));
  EXPECT_EQ(record("h"), "host1");
  ASSERT_TRUE(finish(b));
  EXPECT_EQ(acquire(fired("host2", "300", 3s), true).outcome, Outcome::done);
}

TEST_F(TickTest, TheTickThatRanIsRefusedToItsRunsAndToEarlierTicks) {
  auto b = backend();
  Contender a = fired("host0", "100", 0ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(a));
  ASSERT_TRUE(finish(a));
  ASSERT_FALSE(state().held) << "released: nothing lingers";
  std::string ran = record("t");

  for (Millis after : {Millis(2'000), Millis(-2'000), -k_period}) {
    for (bool queue : {false, true}) {
      Attempt done = acquire(fired("host1", "200", after), queue);
      EXPECT_EQ(done.outcome, Outcome::done) << after.count() << (queue ? " with --wait" : " with -n");
      EXPECT_EQ(std::to_string(done.tick), ran);
      EXPECT_EQ(done.holder.host, "host0");
      EXPECT_GT(done.tick_at, 0);
      ASSERT_TRUE(done.held_for);
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
  EXPECT_EQ(std::to_string(events[0].tick.value_or(0)), ran);
  EXPECT_EQ(events[0].period_ms, k_period.count());

  // The next tick runs.
  EXPECT_EQ(acquire(fired("host1", "201", k_period), false).outcome, Outcome::acquired);
}

// The tick is taken from the server's clock and counted from the tick that last ran, not from the
// epoch: a host whose clock is off, or a schedule half a period from the epoch, changes nothing.
TEST_F(TickTest, TicksAreHalfAPeriodAroundTheTickThatLastRan) {
  const Millis minute(60'000);
  Contender a = fired("host0", "100", 0ms, minute);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(a));
  ASSERT_TRUE(finish(a));
  // 20s later (a host whose clock is 40s ahead, firing its next minute): the same tick.
  EXPECT_EQ(acquire(fired("host1", "200", 20s, minute), false).outcome, Outcome::done);
  EXPECT_EQ(acquire(fired("host1", "201", 29s, minute), false).outcome, Outcome::done);
  // Past half the period: the next tick, which runs once.
  Contender c = fired("host2", "300", 31s, minute);
  ASSERT_EQ(acquire(c, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(c));
  ASSERT_TRUE(finish(c));
  EXPECT_EQ(acquire(fired("host3", "400", 33s, minute), false).outcome, Outcome::done) << "2s after its run";
  EXPECT_EQ(acquire(fired("host3", "401", 60s, minute), false).outcome, Outcome::done)
      << "counted from the tick that ran last, 31s";
  EXPECT_EQ(acquire(fired("host3", "402", 62s, minute), false).outcome, Outcome::acquired);
}

TEST_F(TickTest, ADailyJobWhoseHostsFireSecondsApartRunsOnceWhereverTheEpochIs) {
  const Millis day(86'400'000);
  Contender a = fired("host0", "100", 0ms, day);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(a));
  ASSERT_TRUE(finish(a));
  EXPECT_EQ(acquire(fired("host1", "200", 2s, day), false).outcome, Outcome::done);
  EXPECT_EQ(acquire(fired("host2", "300", -2s, day), false).outcome, Outcome::done) << "or before it";
}

TEST_F(TickTest, AMarkedTickGivenBackUnusedIsPutBack) {
  Contender a = fired("host0", "100", 0ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(a));
  ASSERT_TRUE(finish(a));
  std::string first = record("t");

  // The next tick is marked, then given back: its command proved not started (the guard refused it).
  Contender b = fired("host1", "200", k_period);
  ASSERT_EQ(acquire(b, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(b));
  ASSERT_TRUE(release(b));
  EXPECT_EQ(record("t"), first) << "the tick before is back";
  EXPECT_EQ(record("h"), "host0");
  EXPECT_EQ(acquire(fired("host2", "301", 1s), false).outcome, Outcome::done) << "the earlier tick stays run";
  Contender c = fired("host2", "302", k_period + 2s);
  EXPECT_EQ(acquire(c, false).outcome, Outcome::acquired) << "its tick was not consumed";
}

// A taker held up between its mark and its start, past its lease (a frozen VM): the guard refuses
// the start, and the give-back finds the lock gone, and puts the tick back all the same.
TEST_F(TickTest, AMarkedTickGivenBackAfterItsLeaseLapsedIsPutBack) {
  Contender a = fired("host0", "100", 0ms, k_period, 150ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(a));
  ASSERT_TRUE(eventually([&] { return !state().held; }, 5s));
  EXPECT_FALSE(release(a)) << "not held any more";
  EXPECT_FALSE(recorded()) << "the first tick of the lock: no record left";
  Contender b = fired("host1", "200", 2s);
  EXPECT_EQ(acquire(b, false).outcome, Outcome::acquired) << "another host runs the tick";
}

TEST_F(TickTest, AGiveBackAfterAnotherHoldMarkedItsTickLeavesThatRecord) {
  Contender a = fired("host0", "100", 0ms, k_period, 150ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(a));
  ASSERT_TRUE(eventually([&] { return !state().held; }, 5s));
  // Meanwhile the next tick's run took the lock and marked it.
  Contender b = fired("host1", "200", k_period);
  ASSERT_EQ(acquire(b, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(b));
  EXPECT_FALSE(release(a));
  EXPECT_EQ(record("id"), b.id()) << "a later hold's record stays";
}

TEST_F(TickTest, ARunRefusedBecauseTheTickBeforeStillHoldsTheLockIsAnOverrun) {
  auto b = backend();
  Contender a = fired("host0", "100", 0ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(a));
  int64_t held_tick = info_tick();
  Attempt skipped = acquire(fired("host1", "200", k_period), false);
  ASSERT_EQ(skipped.outcome, Outcome::busy);
  ASSERT_TRUE(skipped.overrun);
  EXPECT_EQ(*skipped.overrun, held_tick);
  std::vector<lock::Event> events = b->read_log(name, 1, "");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "overrun");
  EXPECT_EQ(events[0].held_by.host, "host0");
  ASSERT_TRUE(events[0].tick);
  EXPECT_NEAR(static_cast<double>(*events[0].tick - held_tick), static_cast<double>(k_period.count()), 500.0)
      << "the tick skipped";
  EXPECT_EQ(call({"HGET", name.summary_key(), "n.overrun"}).str, "1") << "counted apart from busy";
  EXPECT_EQ(call({"HEXISTS", name.summary_key(), "n.busy"}).integer, 0);
}

TEST_F(TickTest, TheAcquisitionSaysWhichTickItTook) {
  auto b = backend();
  Contender a = fired("host0", "100", 0ms);
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  std::vector<lock::Event> events = b->read_log(name, 1, "");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, "acquired");
  EXPECT_EQ(events[0].tick, info_tick());
  EXPECT_EQ(events[0].period_ms, k_period.count());
}

TEST_F(TickTest, AWaiterGrantedAfterItsTickRanLeavesAsDone) {
  // A run of the tick before holds the lock past the period; two hosts of the next tick wait.
  Contender old = fired("host0", "100", -k_period);
  ASSERT_EQ(acquire(old, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(old));
  Contender w1 = fired("host1", "200", 0ms);
  Contender w2 = fired("host2", "300", 1s);
  Attempt a1 = acquire(w1);
  Attempt a2 = acquire(w2);
  ASSERT_EQ(a1.outcome, Outcome::queued);
  ASSERT_EQ(a2.outcome, Outcome::queued);

  // The first waiter is granted and claims; its tick runs when it marks it.
  ASSERT_TRUE(finish(old));
  a1 = step(w1, a1);
  ASSERT_EQ(a1.outcome, Outcome::acquired);
  ASSERT_TRUE(mark(w1));
  EXPECT_EQ(record("h"), "host1");

  // The second is granted when it ends, and leaves at its claim: the tick ran.
  ASSERT_TRUE(finish(w1));
  EXPECT_EQ(state().holders.at(0).holder.host, "host2") << "granted, not yet claimed";
  Attempt late = step(w2, a2);
  EXPECT_EQ(late.outcome, Outcome::done);
  EXPECT_EQ(late.holder.host, "host1");
  EXPECT_EQ(record("h"), "host1") << "the record is untouched";
}

TEST_F(TickTest, AWaitingRunLeavesTheQueueAtItsNextStepOnceItsTickRan) {
  auto b = backend();
  Contender old = fired("host0", "100", -k_period);
  ASSERT_EQ(acquire(old, false).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(old));
  Contender w1 = fired("host1", "200", 0ms);
  Contender w2 = fired("host2", "300", 1s);
  Contender w3 = fired("host3", "400", k_period);
  ASSERT_EQ(acquire(w1).outcome, Outcome::queued);
  ASSERT_EQ(acquire(w2).outcome, Outcome::queued);
  ASSERT_EQ(acquire(w3).outcome, Outcome::queued);
  ASSERT_TRUE(finish(old));

  lock::WaitLimits wait{Millis(5'000), 0, Millis(1'000)};
  lock::WaitHooks hooks{[](Millis d) {
                          std::this_thread::sleep_for(d);
                          return true;
                        },
                        [] { return false; },
                        {}};
  // w1, granted, claims it (through acquire, as a retry would), and starts its command.
  ASSERT_EQ(lock::take_lock(*b, name, wait, w1, {}, hooks).outcome, Outcome::acquired);
  ASSERT_TRUE(mark(w1));
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
