// --preempt: a request is seen by the holder at its renewal, withdrawn when its preemptor leaves
// unseen, and weighed at the release against --min-hold's lingering.
#include "lock/history.hpp"
#include "lock/take.hpp"
#include "protocol.hpp"

namespace rlock::test {
namespace {

using PreemptTest = ProtocolTest;

std::string last_kind(lock::Backend& b, const LockName& name) {
  std::vector<lock::Event> events = b.read_log(name, 1, "");
  return events.empty() ? "" : events.back().kind;
}

// A used hold released with 5s of --min-hold left.
lock::Ending used_with_min_hold_left(const Contender& c) {
  lock::Ending e;
  e.exit_status = "0";
  e.holder = c.holder;
  e.used = true;
  e.linger = 5s;
  return e;
}

Contender preemptible(Contender c) {
  c.preemptible = true;
  return c;
}

Contender preemptor(Contender c) {
  c.preempt = true;
  return c;
}

TEST_F(PreemptTest, ASeenRequestEndsTheHoldPreemptedWithoutLingeringAndServesThePreemptor) {
  auto b = backend();
  Contender h = preemptible(contender("holder"));
  ASSERT_EQ(acquire(h).outcome, Outcome::acquired);
  Contender p = preemptor(contender("preemptor"));
  Attempt ap = acquire(p);
  ASSERT_EQ(ap.outcome, Outcome::queued);
  std::optional<lock::Extension> x = lock::extend(node, name, timing, h.token, std::nullopt);
  ASSERT_TRUE(x);
  ASSERT_TRUE(x->preempted_by) << "the renewal tells the holder who asks";
  EXPECT_EQ(x->preempted_by->pid, "preemptor");

  ASSERT_TRUE(lock::release(node, name, timing, h.token, used_with_min_hold_left(h)));
  EXPECT_EQ(last_kind(*b, name), "preempted");
  EXPECT_EQ(step(p, ap).outcome, Outcome::acquired) << "no lingering while the preemptor waits";
}

// A --preemptible waiter asked to stop while only granted claims its grant as any other (a few
// commands), and its mailbox is pushed again for the watch that its run starts with the command.
TEST_F(PreemptTest, AWaiterAskedToStopWhileOnlyGrantedIsWokenAgainAtItsClaim) {
  Contender h = contender("holder");
  ASSERT_EQ(acquire(h).outcome, Outcome::acquired);
  Contender w = preemptible(contender("waiter"));
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  ASSERT_TRUE(release(h));
  ASSERT_EQ(acquire(preemptor(contender("preemptor"))).outcome, Outcome::queued);
  const std::string mailbox = name.mailbox(w.id());
  ASSERT_GE(call({"LLEN", mailbox}).integer, 1) << "the request pushed it";
  ASSERT_EQ(step(w, aw).outcome, Outcome::acquired);
  EXPECT_EQ(call({"LLEN", mailbox}).integer, 1) << "its step took the request's push; the claim pushed it again";
  EXPECT_EQ(call({"HGET", name.info_key(), "claimed"}).str, "1");
  std::optional<lock::Extension> x = lock::extend(node, name, timing, w.token, std::nullopt);
  ASSERT_TRUE(x);
  ASSERT_TRUE(x->preempted_by) << "its renewal tells it who asks";
  EXPECT_EQ(x->preempted_by->pid, "preemptor");
}

TEST_F(PreemptTest, AnUnseenRequestWhosePreemptorIsGoneNeitherMarksTheReleaseNorStopsItsLingering) {
  auto b = backend();
  Contender h = preemptible(contender("holder"));
  ASSERT_EQ(acquire(h).outcome, Outcome::acquired);
  Timing dying = timing;
  dying.lease = 200ms;
  ASSERT_EQ(acquire(preemptor(contender("gone")), true, &dying).outcome, Outcome::queued);
  std::this_thread::sleep_for(3 * dying.lease);  // its heartbeats stopped: its place lapsed
  std::optional<lock::Extension> x = lock::extend(node, name, timing, h.token, std::nullopt);
  ASSERT_TRUE(x);
  EXPECT_FALSE(x->preempted_by) << "the holder is not asked to stop for a request whose place lapsed";

  ASSERT_TRUE(lock::release(node, name, timing, h.token, used_with_min_hold_left(h)));
  EXPECT_EQ(last_kind(*b, name), "released") << "the holder never saw the request";
  LockState s = state();
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_TRUE(s.holders.front().lingering) << "--min-hold is kept: nobody waits to preempt it";
}

TEST_F(PreemptTest, APreemptorThatLeavesWithdrawsItsUnseenRequest) {
  Contender h = preemptible(contender("holder"));
  ASSERT_EQ(acquire(h).outcome, Outcome::acquired);
  Contender p = preemptor(contender("preemptor"));
  ASSERT_EQ(acquire(p).outcome, Outcome::queued);
  lock::cancel(node, name, timing, p.token, false);
  std::optional<lock::Extension> x = lock::extend(node, name, timing, h.token, std::nullopt);
  ASSERT_TRUE(x);
  EXPECT_FALSE(x->preempted_by) << "the holder is not asked to stop for a request that left";
}

TEST_F(PreemptTest, APreemptorWhoseWaitRunsOutWithdrawsItsUnseenRequest) {
  Contender h = preemptible(contender("holder"));
  ASSERT_EQ(acquire(h).outcome, Outcome::acquired);
  auto b = backend();
  lock::WaitLimits limits;
  limits.wait = 200ms;
  lock::WaitHooks hooks;
  hooks.pause = [](Millis d) {
    std::this_thread::sleep_for(d);
    return true;
  };
  hooks.interrupted = [] { return false; };
  EXPECT_EQ(lock::take_lock(*b, name, limits, preemptor(contender("preemptor")), {}, hooks).outcome, Outcome::busy);
  EXPECT_EQ(state().queue_length, 0);
  std::optional<lock::Extension> x = lock::extend(node, name, timing, h.token, std::nullopt);
  ASSERT_TRUE(x);
  EXPECT_FALSE(x->preempted_by) << "the holder is not asked to stop for a request that gave up";
  EXPECT_EQ(state().holders.at(0).holder.pid, "holder");
}

TEST_F(PreemptTest, APreemptorGoesAheadOfPlainWaitersBehindAHolderThatIsNotPreemptible) {
  Contender h = contender("holder");
  ASSERT_EQ(acquire(h).outcome, Outcome::acquired);
  Contender w = contender("plain");
  Attempt aw = acquire(w);
  ASSERT_EQ(aw.outcome, Outcome::queued);
  Contender p = preemptor(contender("preemptor"));
  Attempt ap = acquire(p);
  ASSERT_EQ(ap.outcome, Outcome::queued);
  EXPECT_EQ(ap.position, 1) << "served next";
  std::optional<lock::Extension> x = lock::extend(node, name, timing, h.token, std::nullopt);
  ASSERT_TRUE(x);
  EXPECT_FALSE(x->preempted_by) << "a holder that is not preemptible is never asked";
  ASSERT_TRUE(release(h));
  EXPECT_EQ(step(p, ap).outcome, Outcome::acquired);
  EXPECT_EQ(step(w, aw).outcome, Outcome::queued);
}

}  // namespace
}  // namespace rlock::test
