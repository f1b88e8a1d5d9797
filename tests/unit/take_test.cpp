#include "lock/take.hpp"
#include "error.hpp"
#include "fake_backend.hpp"
#include "util/random.hpp"
#include "util/text.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

using namespace std::chrono_literals;
using rlock::Error;
using rlock::lock::Attempt;
using rlock::lock::Contender;
using rlock::lock::LockName;
using rlock::lock::Timing;
using rlock::lock::WaitHooks;
using rlock::lock::WaitLimits;
using rlock::util::Millis;
using Outcome = rlock::lock::Attempt::Outcome;

namespace take_test {

// No jitter: the middle of its range, so that each wait step blocks a whole heartbeat, which the
// tests can name.
uint64_t no_jitter(uint64_t bound) { return bound / 2; }

Timing timing() {
  Timing t;
  t.heartbeat = 40ms;
  t.jitter = no_jitter;
  return t;
}

FakeBackend::Answer answer(Outcome o, int position = 0, std::vector<std::string> watch = {},
                           std::optional<Millis> ttl_left = std::nullopt) {
  return [=] {
    Attempt a;
    a.outcome = o;
    a.position = position;
    a.watch = watch;
    a.ttl_left = ttl_left;
    a.queue_length = position;
    return a;
  };
}

FakeBackend::Answer fails(int code) {
  return [code]() -> Attempt { throw Error(code, "fails"); };
}
FakeBackend::Answer blips() {
  return []() -> Attempt { throw rlock::lock::TransientError(69, "TRYAGAIN"); };
}

struct Hooks {
  std::vector<Millis> pauses;
  bool interrupted = false;
  int progress = 0;
  WaitHooks get() {
    WaitHooks h;
    h.pause = [this](Millis d) {
      pauses.push_back(d);
      return true;
    };
    h.interrupted = [this] { return interrupted; };
    h.progress = [this](const Attempt&, Millis) { ++progress; };
    return h;
  }
};

WaitLimits wait_for(std::optional<Millis> wait) {
  WaitLimits l;
  l.wait = wait;
  return l;
}

const LockName k_name{"rlock:", "k"};
Contender contender() {
  Contender c;
  c.token = std::string(48, 'a');
  return c;
}

TEST(TakeLock, WaitsStepByStepWatchingWhatEachAnswerSaid) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::queued, 2, {"before"})};
  b.wait_answers = {answer(Outcome::queued, 1, {"holder"}, 5ms), answer(Outcome::acquired)};
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(std::nullopt), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::acquired);
  ASSERT_EQ(b.acquire_calls, std::vector<bool>{true}) << "asks to join the queue";
  ASSERT_EQ(b.wait_calls.size(), 2u);
  EXPECT_EQ(b.wait_calls[0].watch, std::vector<std::string>{"before"});
  EXPECT_EQ(b.wait_calls[0].heartbeat, 40ms) << "the heartbeat";
  EXPECT_EQ(b.wait_calls[1].watch, std::vector<std::string>{"holder"});
  EXPECT_EQ(b.wait_calls[1].heartbeat, 7ms) << "the head wakes when the holder's lease ends";
  EXPECT_EQ(h.progress, 2);
  EXPECT_TRUE(b.cancel_calls.empty());
  EXPECT_TRUE(h.pauses.empty());
}

TEST(TakeLock, WaitStepsAreJitteredByATenthOfTheHeartbeatEitherWay) {
  // Waiters queued by one timer must not step in phase: each step blocks a heartbeat give or take
  // a random tenth of it, one heartbeat on average (an idle waiter steps once a heartbeat).
  Timing t = timing();
  t.heartbeat = 1000ms;
  t.jitter = rlock::util::random_below;
  FakeBackend b(t);
  b.acquire_answers = {answer(Outcome::queued, 3, {"before"})};
  for (int i = 0; i < 50; ++i) b.wait_answers.push_back(answer(Outcome::queued, 3, {"before"}));
  b.wait_answers.push_back(answer(Outcome::acquired));
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(std::nullopt), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::acquired);
  ASSERT_EQ(b.wait_calls.size(), 51u);
  Millis least = 2000ms;
  Millis most = 0ms;
  Millis sum = 0ms;
  for (const auto& w : b.wait_calls) {
    EXPECT_GE(w.heartbeat, 900ms);
    EXPECT_LE(w.heartbeat, 1100ms);
    least = std::min(least, w.heartbeat);
    most = std::max(most, w.heartbeat);
    sum += w.heartbeat;
  }
  // 51 draws of 201 values: all within 20ms of each other has a chance below 1e-40.
  EXPECT_GE(most - least, 20ms) << "the steps spread";
  // Their mean is 1000ms, its standard deviation 8ms: 40ms off has a chance below 1e-6.
  EXPECT_NEAR(static_cast<double>(sum.count()) / 51.0, 1000.0, 40.0) << "centred on the heartbeat";
}

TEST(TakeLock, AWaiterBehindOthersWithTheFarLeaseStepsAtTheFarHeartbeat) {
  // 2.5 heartbeats, give or take a random tenth of that; the standard heartbeat again once an
  // answer has no far lease (the head of the queue).
  Timing t = timing();
  t.heartbeat = 1000ms;
  t.jitter = rlock::util::random_below;
  FakeBackend b(t);
  b.acquire_answers = {answer(Outcome::queued, 3, {"before"})};
  auto far = [](int position) -> FakeBackend::Answer {
    return [position] {
      Attempt a = answer(Outcome::queued, position, {"before"})();
      a.far = true;
      return a;
    };
  };
  for (int i = 0; i < 20; ++i) b.wait_answers.push_back(far(3));
  b.wait_answers.push_back(answer(Outcome::queued, 1, {"holder"}));
  b.wait_answers.push_back(answer(Outcome::acquired));
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(std::nullopt), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::acquired);
  ASSERT_EQ(b.wait_calls.size(), 22u);
  EXPECT_LE(b.wait_calls[0].heartbeat, 1100ms) << "after the first attempt: the standard heartbeat";
  for (size_t i = 1; i <= 20; ++i) {
    EXPECT_GE(b.wait_calls[i].heartbeat, 2250ms) << i;
    EXPECT_LE(b.wait_calls[i].heartbeat, 2750ms) << i;
  }
  EXPECT_GE(b.wait_calls[21].heartbeat, 900ms);
  EXPECT_LE(b.wait_calls[21].heartbeat, 1100ms) << "the head: the standard heartbeat";
}

TEST(TakeLock, AWaiterFarBehindStepsWhenItsFirstProgressLineIsDue) {
  // The progress shows its first line 2s into the wait: a waiter that steps at the far heartbeat
  // (2.5s) takes a step then, not a far heartbeat later, and a full one, which the line shows
  // (these steps take no time: the wait is still at its start).
  Timing t = timing();
  t.heartbeat = 1000ms;
  FakeBackend b(t);
  b.acquire_answers = {answer(Outcome::queued, 3, {"before"})};
  b.wait_answers = {[] {
                      Attempt a = answer(Outcome::queued, 3, {"before"})();
                      a.far = true;
                      return a;
                    },
                    answer(Outcome::acquired)};
  Hooks h;
  WaitHooks hooks = h.get();
  hooks.first_shown = 2000ms;
  hooks.fresh_every = 1000ms;  // (a CI's lines)
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(std::nullopt), contender(), {}, hooks);
  EXPECT_EQ(a.outcome, Outcome::acquired);
  ASSERT_EQ(b.wait_calls.size(), 2u);
  EXPECT_GT(b.wait_calls[1].heartbeat, 1900ms);
  EXPECT_LE(b.wait_calls[1].heartbeat, 2000ms) << "the far heartbeat is 2.5s: the step comes when the line is due";
  EXPECT_TRUE(b.wait_calls[1].fresh) << "it ends more than fresh_every after the last full step: a full one";
}

TEST(TakeLock, AGrantTheMasterCannotConfirmIsUnavailableWithoutWaitingNeverBusy) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::acquired)};
  b.grants_confirmed = {false};
  Hooks h;
  try {
    rlock::lock::take_lock(b, k_name, wait_for(0ms), contender(), {}, h.get());
    ADD_FAILURE() << "an unconfirmed grant was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 69);
  }
  EXPECT_EQ(b.acquire_calls.size(), 1u);
}

TEST(TakeLock, NoWaitAsksOnceWithoutQueueing) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::busy)};
  Hooks h;
  EXPECT_EQ(rlock::lock::take_lock(b, k_name, wait_for(0ms), contender(), {}, h.get()).outcome, Outcome::busy);
  EXPECT_EQ(b.acquire_calls, std::vector<bool>{false});
  EXPECT_TRUE(b.wait_calls.empty());
  EXPECT_TRUE(b.cancel_calls.empty());
}

TEST(TakeLock, AServerNeverReachedIsAnErrorAtOnce) {
  FakeBackend b(timing());
  b.acquire_answers = {fails(69)};
  Hooks h;
  EXPECT_THROW(rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get()), Error);
  EXPECT_TRUE(h.pauses.empty());
  EXPECT_TRUE(b.cancel_calls.empty()) << "it never had a place";
}

TEST(TakeLock, BlipsAreWaitedOutWithBackoffOnceTheServerAnswered) {
  FakeBackend b(timing());
  b.acquire_answers = {blips(), answer(Outcome::queued, 1)};
  b.wait_answers = {fails(69), blips(), answer(Outcome::acquired)};
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::acquired);
  EXPECT_EQ(h.pauses.size(), 3u);
  EXPECT_EQ(b.acquire_calls.size(), 2u);
  EXPECT_EQ(b.wait_calls.size(), 3u);
  EXPECT_TRUE(b.cancel_calls.empty());
}

TEST(TakeLock, AnErrorThatIsNotABlipLeavesTheQueueAndEndsTheWait) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::queued, 1)};
  b.wait_answers = {fails(65)};
  Hooks h;
  try {
    rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 65);
  }
  EXPECT_EQ(b.cancel_calls, std::vector<bool>{false});
}

TEST(TakeLock, ASignalLeavesTheQueue) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::queued, 3)};
  Hooks h;
  h.interrupted = true;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::busy);
  EXPECT_EQ(b.cancel_calls, std::vector<bool>{false}) << "interrupted, not timed out";
}

TEST(TakeLock, AWaitThatRunsOutLeavesTheQueueAsTimedOut) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::queued, 1)};
  for (int i = 0; i < 1000; ++i)
    b.wait_answers.push_back([] {
      std::this_thread::sleep_for(5ms);
      Attempt a;
      a.outcome = Outcome::queued;
      a.position = 1;
      return a;
    });
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(50ms), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::busy);
  EXPECT_EQ(b.cancel_calls, std::vector<bool>{true});
  for (const auto& w : b.wait_calls) EXPECT_LE(w.heartbeat, 50ms) << "no step waits past the wait's end";
}

TEST(TakeLock, SupersededEndsTheWaitWithoutCancel) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::queued, 2)};
  b.wait_answers = {answer(Outcome::superseded)};
  Hooks h;
  EXPECT_EQ(rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get()).outcome, Outcome::superseded);
  EXPECT_TRUE(b.cancel_calls.empty()) << "its place is gone already";
}

TEST(TakeLock, ATickRunWhileWaitingLeavesTheQueueAsDone) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::queued, 2)};
  b.wait_answers = {answer(Outcome::done)};
  Hooks h;
  EXPECT_EQ(rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get()).outcome, Outcome::done);
  EXPECT_EQ(b.cancel_calls, std::vector<bool>{false}) << "its place, or a grant, is given up; not a timeout";
}

TEST(TakeLock, ATickRunBeforeTheFirstAttemptEndsItWithoutCancel) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::done)};
  Hooks h;
  EXPECT_EQ(rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get()).outcome, Outcome::done);
  EXPECT_TRUE(b.cancel_calls.empty());
  EXPECT_TRUE(b.wait_calls.empty());
}

// --once-per: each request says the period and how long ago the run fired (its own monotonic
// clock), never a wall-clock time; without it, the argument is empty.
TEST(ContenderArgs, TheTickIsThePeriodAndTheAgeOfTheRun) {
  rlock::lock::Contender c;
  c.token = std::string(48, 'a');
  EXPECT_EQ(rlock::lock::acquire_call(c, false).tick, "");
  c.once_per = rlock::lock::Contender::OncePer{Millis(300'000), rlock::util::BootClock::now() - Millis(2'000)};
  std::string tick = rlock::lock::acquire_call(c, false).tick;
  std::vector<std::string> words = rlock::util::split(tick, " ");
  ASSERT_EQ(words.size(), 2u) << tick;
  EXPECT_EQ(words[0], "300000");
  int64_t age = std::stoll(words[1]);
  EXPECT_GE(age, 2'000);
  EXPECT_LT(age, 60'000);
}

TEST(TakeLock, ReplicasThatDoNotConfirmGiveTheLockBack) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::acquired)};
  b.on_confirm_replicas = [] { throw Error(69, "only 0 of 1 replicas"); };
  WaitLimits l = wait_for(0ms);
  l.wait_replicas = 1;
  Hooks h;
  EXPECT_THROW(rlock::lock::take_lock(b, k_name, l, contender(), {}, h.get()), Error);
  EXPECT_EQ(b.release_calls, 1);
}

TEST(TakeLock, AQuorumTriesABusyLockAgainAfterAPause) {
  FakeBackend b(timing(), true);
  b.acquire_answers = {answer(Outcome::busy), answer(Outcome::busy), answer(Outcome::acquired)};
  Hooks h;
  EXPECT_EQ(rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get()).outcome, Outcome::acquired);
  EXPECT_EQ(h.pauses.size(), 2u);
  EXPECT_TRUE(b.wait_calls.empty()) << "a quorum has no queue";
}

TEST(TakeLock, AQuorumWithNoWaitTriesAContendedLockAFewTimesOnly) {
  FakeBackend b(timing(), true);
  auto contended = [] {
    Attempt a;
    a.contended = true;
    return a;
  };
  for (int i = 0; i < 10; ++i) b.acquire_answers.push_back(contended);
  Hooks h;
  EXPECT_EQ(rlock::lock::take_lock(b, k_name, wait_for(0ms), contender(), {}, h.get()).outcome, Outcome::busy);
  EXPECT_EQ(b.acquire_calls.size(), 4u);
  for (Millis p : h.pauses) {
    EXPECT_GE(p, 10ms);
    EXPECT_LT(p, 50ms);
  }

  FakeBackend held(timing(), true);
  held.acquire_answers = {answer(Outcome::busy)};
  EXPECT_EQ(rlock::lock::take_lock(held, k_name, wait_for(0ms), contender(), {}, h.get()).outcome, Outcome::busy);
  EXPECT_EQ(held.acquire_calls.size(), 1u) << "held by someone on a majority: busy at once";
}

// A place in the queue at `position`, as the server gave it (arrival: its score; "" when the step
// did not give it), renewed by a request sent `ago` (now by default).
FakeBackend::Answer placed(int position, std::string arrival = "", Millis ago = 0ms) {
  return [=] {
    Attempt a;
    a.outcome = Outcome::queued;
    a.position = position;
    a.queue_length = position;
    a.arrival = arrival;
    a.sent_at = rlock::util::BootClock::now() - ago;
    return a;
  };
}

TEST(TakeLock, AFirstGrantTheMasterDoesNotConfirmIsAskedForAgain) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::acquired), answer(Outcome::acquired)};
  b.grants_confirmed = {false, true};
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::acquired);
  EXPECT_EQ(b.confirm_grant_calls, 2);
  EXPECT_EQ(b.acquire_calls.size(), 2u) << "asked for again, as after a failover";
  EXPECT_TRUE(b.wait_calls.empty());
  EXPECT_EQ(h.pauses.size(), 1u) << "after a pause";
  EXPECT_TRUE(b.cancel_calls.empty());
}

// A waiter granted the lock by a master the majority no longer names gives it back and steps in
// the queue of the master they name at once (after the pause), joining it again in its order.
TEST(TakeLock, AGrantTheMasterDoesNotConfirmIsAskedForAgainInTheSameOrder) {
  FakeBackend b(timing());
  b.acquire_answers = {placed(1, "1000")};
  b.wait_answers = {answer(Outcome::acquired), answer(Outcome::acquired)};
  b.grants_confirmed = {false, true};
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::acquired);
  EXPECT_EQ(b.confirm_grant_calls, 2);
  EXPECT_EQ(b.acquire_calls.size(), 1u);
  ASSERT_EQ(b.wait_calls.size(), 2u) << "asked for again with a wait step";
  EXPECT_EQ(b.wait_calls[1].heartbeat, 0ms) << "at once";
  EXPECT_EQ(b.wait_calls[1].arrival, "1000") << "in its old order";
  EXPECT_EQ(h.pauses.size(), 1u) << "after a pause";
  EXPECT_TRUE(b.cancel_calls.empty());
}

// The master is asked for at every step at the head of the queue, every second step behind
// others; when it moved, the next step is a full one there at once, in the waiter's old order.
TEST(TakeLock, AWaiterFollowsTheMasterAtTheHeadAtEveryStepBehindOthersEverySecond) {
  FakeBackend b(timing());
  b.acquire_answers = {placed(3, "1000")};
  b.wait_answers = {placed(3), placed(3), placed(2),
                    placed(2), placed(1), placed(1),
                    placed(1), placed(1), answer(Outcome::acquired)};
  // Asked after steps 2, 4 (behind others), 5, 6 (the head: moved; the step there follows at
  // once), and 8.
  b.masters_moved = {false, false, false, true, false};
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::acquired);
  EXPECT_EQ(b.follow_calls, 5);
  ASSERT_EQ(b.wait_calls.size(), 9u);
  for (size_t i = 0; i < b.wait_calls.size(); ++i) {
    EXPECT_EQ(b.wait_calls[i].heartbeat == 0ms, i == 6) << "only the step after the move is at once: " << i;
    EXPECT_EQ(b.wait_calls[i].arrival, "1000") << "a place renewed within its lease carries its arrival: " << i;
  }
}

// A waiter whose last step is older than its place's lease (it was stopped) may have lost its
// place for its own reasons: it joins again at the end, carrying nothing; after a server's error,
// it carries its arrival whatever the time.
TEST(TakeLock, OnlyAPlaceTheServerLostIsTakenAgainInItsOrder) {
  Timing t = timing();
  t.lease = 60ms;
  FakeBackend b(t);
  b.acquire_answers = {placed(2, "1000")};
  b.wait_answers = {placed(2, "", 80ms), placed(2), blips(), placed(2), answer(Outcome::acquired)};
  // (The first wait step's request went out 80ms before its answer: the waiter was stopped.)
  Hooks h;
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, h.get());
  EXPECT_EQ(a.outcome, Outcome::acquired);
  ASSERT_EQ(b.wait_calls.size(), 5u);
  EXPECT_EQ(b.wait_calls[0].arrival, "1000");
  EXPECT_EQ(b.wait_calls[1].arrival, "") << "the last step was 80ms ago, its lease 60ms";
  EXPECT_EQ(b.wait_calls[3].arrival, "1000") << "after a server's error";
  EXPECT_EQ(b.wait_calls[3].heartbeat, 0ms) << "at once after the pause";
}

TEST(TakeLock, ABlipWithNoWaitIsAnErrorAtOnce) {
  FakeBackend b(timing());
  b.acquire_answers = {blips()};
  Hooks h;
  EXPECT_THROW(rlock::lock::take_lock(b, k_name, wait_for(0ms), contender(), {}, h.get()), Error);
  EXPECT_TRUE(h.pauses.empty());
  EXPECT_TRUE(b.cancel_calls.empty());
}

TEST(TakeLock, ASignalDuringABlipLeavesTheQueue) {
  FakeBackend b(timing());
  b.acquire_answers = {answer(Outcome::queued, 2)};
  b.wait_answers = {blips()};
  Hooks h;
  WaitHooks hooks = h.get();
  int asked = 0;
  hooks.interrupted = [&] { return ++asked > 1; };  // the signal arrives during the wait step
  Attempt a = rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, hooks);
  EXPECT_EQ(a.outcome, Outcome::busy);
  EXPECT_EQ(b.cancel_calls, std::vector<bool>{false});
  EXPECT_TRUE(h.pauses.empty());

  FakeBackend paused(timing());
  paused.acquire_answers = {answer(Outcome::queued, 2)};
  paused.wait_answers = {blips()};
  WaitHooks ends = h.get();
  ends.pause = [](Millis) { return false; };  // a signal during the backoff
  EXPECT_EQ(rlock::lock::take_lock(paused, k_name, wait_for(10s), contender(), {}, ends).outcome, Outcome::busy);
  EXPECT_EQ(paused.cancel_calls, std::vector<bool>{false});
  EXPECT_EQ(paused.wait_calls.size(), 1u);
}

TEST(TakeLock, ASignalDuringAQuorumsPauseEndsTheRetries) {
  FakeBackend b(timing(), true);
  b.acquire_answers = {answer(Outcome::busy), answer(Outcome::acquired)};
  Hooks h;
  WaitHooks hooks = h.get();
  hooks.pause = [](Millis) { return false; };
  EXPECT_EQ(rlock::lock::take_lock(b, k_name, wait_for(10s), contender(), {}, hooks).outcome, Outcome::busy);
  EXPECT_EQ(b.acquire_calls.size(), 1u);
  EXPECT_TRUE(b.cancel_calls.empty()) << "a quorum has no queue to leave";
  EXPECT_EQ(h.progress, 1);
}

// The bounds of the queue that rlock(7) documents (Waiting) and that the protocol tests take as
// given, scaled down: a heartbeat of 1s (2.5s behind others), a waiter's lease of 3s (4.5s behind
// others) and a claim window of 2s, sent to every script.
TEST(QueueTiming, TheStandardTimingIsTheDocumentedOne) {
  Timing t = Timing::standard(1'000);
  EXPECT_EQ(t.heartbeat, 1'000ms);
  EXPECT_EQ(t.far_heartbeat(), 2'500ms);
  EXPECT_EQ(t.lease, 3'000ms);
  EXPECT_EQ(t.far_lease(), 4'500ms);
  EXPECT_EQ(t.claim, 2'000ms);
  std::vector<std::string> args = t.script_args({});
  ASSERT_GE(args.size(), 2u);
  EXPECT_EQ(args[0], "3000") << "the lease";
  EXPECT_EQ(args[1], "2000") << "the claim window";
}

}  // namespace take_test
