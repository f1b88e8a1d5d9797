// The queue: FIFO order, the hand-off push, claim windows, dead waiters and the bounded work of
// each script call, cancel and supersede.
#include "protocol.hpp"

#include "lock/scripts.hpp"
#include "lock/take.hpp"

#include <atomic>
#include <future>

namespace rlock::test {
namespace {

using QueueTest = ProtocolTest;

// A Node that passes every call on and records, after each script, its `more` flag and how many
// waiters the queue still holds.
class CountingNode final : public lock::Node {
public:
  CountingNode(lock::Node& inner, std::string queue_key) : m_inner(inner), m_queue(std::move(queue_key)) {}
  redis::Reply eval(const redis::Script& script, const std::vector<std::string>& keys,
                    const std::vector<std::string>& args, const redis::Undo& undo = {}) override {
    redis::Reply r = m_inner.eval(script, keys, args, undo);
    // The light heartbeat does no queue work (and its answer has no header): not counted.
    if (script.name == lock::scripts::k_beat.name) return r;
    codes.push_back(r.elements.empty() ? -1 : r.elements[0].integer);
    more.push_back(r.elements.size() > 1 && r.elements[1].integer == 1);
    queued.push_back(m_inner.pipeline({{"ZCARD", m_queue}}).at(0).integer);
    return r;
  }
  std::vector<redis::Reply> pipeline(const std::vector<redis::Command>& commands, util::Millis budget = {}) override {
    return m_inner.pipeline(commands, budget);
  }
  redis::Command script_command(const redis::Script& script, const std::vector<std::string>& keys,
                                const std::vector<std::string>& args) override {
    return m_inner.script_command(script, keys, args);
  }
  std::vector<std::string> scan(const std::string& match) override { return m_inner.scan(match); }
  int64_t wait_replicas(int n, util::Millis timeout) override { return m_inner.wait_replicas(n, timeout); }

  std::vector<int64_t> codes;
  std::vector<bool> more;
  std::vector<int64_t> queued;

private:
  lock::Node& m_inner;
  std::string m_queue;
};

// The scripts' budget of entries removed or granted per call (scripts/common/call.lua, BUDGET).
constexpr int64_t k_budget = 20;

// Asserts that each call removed at most the budget of waiters, and that the work took several.
void expect_bounded(const CountingNode& n, int64_t queued_before) {
  int64_t before = queued_before;
  for (int64_t after : n.queued) {
    EXPECT_LE(before - after, k_budget + 1) << "one call removed more than the budget";
    before = after;
  }
}

TEST_F(QueueTest, WaitersAreServedInArrivalOrder) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  std::vector<Contender> w = {contender("101"), contender("102"), contender("103")};
  std::vector<Attempt> at;
  for (size_t i = 0; i < w.size(); ++i) {
    at.push_back(acquire(w[i]));
    ASSERT_EQ(at[i].outcome, Outcome::queued);
    EXPECT_EQ(at[i].position, static_cast<int>(i + 1));
    EXPECT_EQ(at[i].queue_length, static_cast<int>(i + 1));
    EXPECT_EQ(at[i].holder.pid, "100");
  }
  // Each watches the one before it; the head watches the holder.
  EXPECT_EQ(at[0].watch, std::vector<std::string>{a.id()});
  EXPECT_EQ(at[1].watch, std::vector<std::string>{w[0].id()});
  EXPECT_EQ(at[2].watch, std::vector<std::string>{w[1].id()});

  LockState s = state();
  EXPECT_EQ(s.queue_length, 3);
  ASSERT_EQ(s.waiters.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s.waiters[i].holder.pid, w[i].holder.pid);
    EXPECT_EQ(s.waiters[i].position, static_cast<int>(i + 1));
    EXPECT_FALSE(s.waiters[i].shared);
  }
  EXPECT_EQ(state(2).waiters.size(), 2u) << "inspect reads at most the number asked";

  int64_t fence = 0;
  Contender* holder = &a;
  for (size_t i = 0; i < w.size(); ++i) {
    // The ones behind are not served before their turn (a full step: a light one keeps the
    // position it last read).
    for (size_t j = i + 1; j < w.size(); ++j) {
      Attempt later = fresh_step(w[j], at[j]);
      ASSERT_EQ(later.outcome, Outcome::queued);
      EXPECT_EQ(later.position, static_cast<int>(j - i + 1));
      at[j] = later;
    }
    ASSERT_TRUE(release(*holder));
    Attempt got = step(w[i], at[i]);
    ASSERT_EQ(got.outcome, Outcome::acquired) << "waiter " << i;
    EXPECT_GT(got.fence, fence);
    fence = got.fence;
    EXPECT_EQ(state().holders.at(0).holder.pid, w[i].holder.pid);
    holder = &w[i];
  }
  EXPECT_EQ(state().queue_length, 0);
}

// Whoever is refused or waits is told the holder's CI job and note with its host, pid and
// command: the busy answer of -n (the fast path with nobody queued, and the full one), the
// waiting answer of a place in the queue, and, behind shared holders, the first shared holder's.
TEST_F(QueueTest, TheBusyAndWaitingAnswersNameTheHoldersJobAndNote) {
  Contender a = contender("100");
  a.holder.job = "https://ci.example/jobs/81";
  a.holder.note = "release 4.2";
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  auto names_a = [&](const Attempt& got, const char* what) {
    EXPECT_EQ(got.holder.pid, "100") << what;
    EXPECT_EQ(got.holder.job, a.holder.job) << what;
    EXPECT_EQ(got.holder.note, a.holder.note) << what;
  };
  Attempt fast = acquire(contender("101"), false);
  ASSERT_EQ(fast.outcome, Outcome::busy);
  names_a(fast, "busy, nobody queued");
  Attempt queued = acquire(contender("102"));
  ASSERT_EQ(queued.outcome, Outcome::queued);
  names_a(queued, "waiting");
  Attempt full = acquire(contender("103"), false);
  ASSERT_EQ(full.outcome, Outcome::busy);
  EXPECT_EQ(full.queue_length, 1);
  names_a(full, "busy, one queued");

  ASSERT_EQ(call({"FLUSHALL"}).str, "OK");
  Contender s = contender("200", Mode::shared);
  s.holder.job = "https://ci.example/jobs/82";
  s.holder.note = "reading";
  ASSERT_EQ(acquire(s).outcome, Outcome::acquired);
  Attempt behind = acquire(contender("104"));
  ASSERT_EQ(behind.outcome, Outcome::queued);
  EXPECT_EQ(behind.holder.pid, "200");
  EXPECT_EQ(behind.holder.job, s.holder.job);
  EXPECT_EQ(behind.holder.note, s.holder.note);
}

TEST_F(QueueTest, ReleasePushesTheNextWaitersMailbox) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Attempt queued = acquire(b);
  ASSERT_EQ(queued.outcome, Outcome::queued);

  // b blocks in its wait step with a heartbeat far longer than the test allows: only the push of
  // the mailbox it watches wakes it in time.
  const Millis heartbeat = 8s;
  auto waiter = std::async(std::launch::async, [&] {
    redis::Client client(redis::parse_url(shared_server().url()), redis::Timeouts{}, redis::TlsOptions{});
    lock::ClientNode own(client);
    Attempt got = lock::wait_turn(own, name, timing, b, queued, heartbeat);
    return std::make_pair(got, std::chrono::steady_clock::now());
  });
  ASSERT_TRUE(eventually([&] {
    std::string info = call({"INFO", "clients"}).str;
    return info.find("blocked_clients:1") != std::string::npos;
  }));
  auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(release(a));
  ASSERT_EQ(waiter.wait_for(heartbeat - 2s), std::future_status::ready) << "not woken by the release";
  auto [got, woke] = waiter.get();
  EXPECT_EQ(got.outcome, Outcome::acquired);
  EXPECT_LT(woke - released, 3s);
  EXPECT_EQ(state().holders.at(0).holder.pid, "101");
}

TEST_F(QueueTest, AGrantNotClaimedWithinTheClaimWindowGoesToTheNext) {
  // A claim window long enough for the test to see the grant before it lapses, even on a loaded
  // machine.
  Timing t = timing;
  t.claim = 500ms;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  Attempt ab = acquire(b);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.position, 2);

  auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(lock::release(node, name, t, a.token, lock::Ending{}));
  // b is granted, for the claim window only.
  LockState s = state();
  ASSERT_TRUE(s.held);
  EXPECT_EQ(s.holders.at(0).holder.pid, "101");
  EXPECT_LE(*s.holders.at(0).ttl_left_ms, 500);
  EXPECT_EQ(s.queue_length, 1);

  // b never claims; c, stepping, gets it once the window has passed.
  Attempt got;
  ASSERT_TRUE(eventually([&] {
    got = step(c, ac, 20ms, &t);
    ac = got;
    return got.outcome == Outcome::acquired;
  }));
  EXPECT_GE(since(released), t.claim - 20ms);
  // ...and not much later: the window, a step, and a loaded machine's slack.
  EXPECT_LT(since(released), t.claim + 2s);
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
  EXPECT_EQ(*state().holders.at(0).ttl_left_ms > 10'000, true) << "c claimed its whole lease";

  // b's late step finds its grant gone: it waits again, at the end of the queue.
  Attempt late = step(b, ab, 20ms, &t);
  EXPECT_EQ(late.outcome, Outcome::queued);
  EXPECT_EQ(late.position, 1);
  EXPECT_EQ(late.holder.pid, "102");
}

TEST_F(QueueTest, AGrantClaimedWithinItsWindowIsAHold) {
  Timing t = timing;
  t.claim = 5s;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101", Mode::exclusive, 1, 20s);
  Attempt ab = acquire(b);
  ASSERT_TRUE(lock::release(node, name, t, a.token, lock::Ending{}));
  EXPECT_LE(*state().holders.at(0).ttl_left_ms, 5'000);
  ASSERT_EQ(step(b, ab, 20ms, &t).outcome, Outcome::acquired);
  EXPECT_GT(*state().holders.at(0).ttl_left_ms, 5'000);
  EXPECT_EQ(state().holders.at(0).lease_ms, 20'000);
}

TEST_F(QueueTest, ADeadWaiterIsSkippedAndTheNextIsWokenOnItsOwnMailbox) {
  Timing dying = timing;
  dying.lease = 1s;  // c joins behind b before it dies, even on a loaded machine
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  ASSERT_EQ(acquire(b, true, &dying).outcome, Outcome::queued);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.position, 2);
  ASSERT_EQ(ac.watch, std::vector<std::string>{b.id()});

  // b's heartbeats stop: after its lease, inspect no longer shows it.
  ASSERT_TRUE(eventually([&] { return state().waiters.size() == 1; }));
  EXPECT_EQ(state().waiters.at(0).holder.pid, "102");
  EXPECT_EQ(state().waiters.at(0).position, 1);
  EXPECT_EQ(state().queue_length, 1);

  // c still watches b's mailbox, which nobody pushes: the release wakes c on its own.
  ASSERT_TRUE(release(a));
  auto start = std::chrono::steady_clock::now();
  Attempt got = step(c, ac, 8s);
  EXPECT_EQ(got.outcome, Outcome::acquired);
  EXPECT_LT(since(start), 3s);
  EXPECT_EQ(state().queue_length, 0);

  // b comes back (a stopped process continued): it joins the queue again, at its end.
  Attempt back = acquire(b);
  EXPECT_EQ(back.outcome, Outcome::queued);
  EXPECT_EQ(back.position, 1);
}

// A waiter granted the lock while it watched a waiter dropped since is woken by the caller, on
// its own mailbox; the waiter behind it blocks on that mailbox too, and a push goes to whoever
// blocked first. The granted one is still woken at once, not at its heartbeat (2.5s behind others,
// longer than the claim window).
TEST_F(QueueTest, AGrantedWaiterIsWokenThoughTheOneBehindItTakesAPush) {
  Timing dying = timing;
  dying.lease = 1s;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  Contender d = contender("103");
  ASSERT_EQ(acquire(b, true, &dying).outcome, Outcome::queued);
  Attempt ac = acquire(c);
  Attempt ad = acquire(d);
  ASSERT_EQ(ac.watch, std::vector<std::string>{b.id()});
  ASSERT_EQ(ad.watch, std::vector<std::string>{c.id()});
  ASSERT_TRUE(eventually([&] { return state().waiters.size() == 2; })) << "b's lease ran out";

  // d blocks first, then c, each with a heartbeat far longer than the test allows.
  const Millis heartbeat = 20s;
  auto wait_in_thread = [&](const Contender& who, const Attempt& last) {
    return std::async(std::launch::async, [&who, &last, heartbeat, this] {
      redis::Client client(redis::parse_url(shared_server().url()), redis::Timeouts{}, redis::TlsOptions{});
      lock::ClientNode own(client);
      return lock::wait_turn(own, name, timing, who, last, heartbeat);
    });
  };
  auto blocked = [&](int n) {
    return eventually([&] {
      return call({"INFO", "clients"}).str.find("blocked_clients:" + std::to_string(n)) != std::string::npos;
    });
  };
  auto behind = wait_in_thread(d, ad);
  ASSERT_TRUE(blocked(1));
  auto granted = wait_in_thread(c, ac);
  ASSERT_TRUE(blocked(2));

  // The release drops b and grants c, which watched b: c's mailbox is pushed, and d takes a push.
  ASSERT_TRUE(release(a));
  ASSERT_EQ(granted.wait_for(8s), std::future_status::ready) << "c was not woken by the release";
  EXPECT_EQ(granted.get().outcome, Outcome::acquired);
  ASSERT_EQ(behind.wait_for(8s), std::future_status::ready);
  EXPECT_EQ(behind.get().outcome, Outcome::queued);
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
}

// The dying waiters' lease: long enough that all of them are queued before the first dies (a
// later enqueue reaps the dead it finds).
constexpr Millis k_dying_lease = 1s;

TEST_F(QueueTest, ManyDeadWaitersAreDroppedABudgetAtATimeOnRelease) {
  Timing dying = timing;
  dying.lease = k_dying_lease;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  const int64_t dead = 3 * k_budget + 5;
  for (int64_t i = 0; i < dead; ++i) ASSERT_EQ(acquire(contender("d"), true, &dying).outcome, Outcome::queued);
  Contender live = contender("200");
  Attempt al = acquire(live);
  ASSERT_EQ(al.position, dead + 1);
  ASSERT_EQ(state().queue_length, dead + 1) << "all queued before the first died";
  ASSERT_TRUE(eventually([&] { return state().queue_length == 1; }));

  CountingNode counting(node, name.key_of(lock::Part::queue));
  ASSERT_TRUE(lock::release(counting, name, timing, a.token, lock::Ending{}));
  // The release reaped a budget and said "more"; the C++ side called again until the live
  // waiter was granted.
  ASSERT_GE(counting.more.size(), 4u);
  EXPECT_TRUE(counting.more.front());
  EXPECT_FALSE(counting.more.back());
  expect_bounded(counting, dead + 1);
  EXPECT_EQ(counting.queued.back(), 0) << "the live waiter was granted, the dead ones dropped";
  LockState s = state();
  EXPECT_EQ(s.holders.at(0).holder.pid, "200");

  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(step(live, al, 8s).outcome, Outcome::acquired);
  EXPECT_LT(since(start), 3s);
}

TEST_F(QueueTest, AnAttemptBehindManyDeadWaitersCallsAgainUntilItHasAnAnswer) {
  Timing dying = timing;
  dying.lease = k_dying_lease;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  const int64_t dead = 3 * k_budget + 5;
  for (int64_t i = 0; i < dead; ++i) ASSERT_EQ(acquire(contender("d"), true, &dying).outcome, Outcome::queued);
  ASSERT_EQ(state().queue_length, dead) << "all queued before the first died";
  // The holder goes too (its lease ends): the lock is free, the queue full of the dead.
  ASSERT_TRUE(lock::extend(node, name, timing, a.token, Millis(50)));
  ASSERT_TRUE(eventually([&] { return state().queue_length == 0 && !state().held; }));

  CountingNode counting(node, name.key_of(lock::Part::queue));
  Contender b = contender("101");
  Attempt got = lock::try_acquire(counting, name, timing, b, false, {});
  EXPECT_EQ(got.outcome, Outcome::acquired) << "nobody alive waits: the lock is free";
  ASSERT_GE(counting.codes.size(), 3u);
  EXPECT_EQ(counting.codes.front(), 4) << "the first answer: call again";
  EXPECT_EQ(counting.codes.back(), 1);
  expect_bounded(counting, dead);
}

// Waiters killed together (no cancel, no more steps), the lock released while they still had
// their leases: the head is granted it and never claims it. Once the leases and the claim
// window have lapsed, the lock shows free with nobody waiting, and an attempt that does not
// queue takes it.
TEST_F(QueueTest, DeadWaitersGrantedTheLockLeaveItFreeOnceTheirLeasesLapse) {
  Timing dying = timing;
  dying.lease = k_dying_lease;
  dying.claim = k_dying_lease;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  const int64_t dead = 3 * k_budget + 5;
  for (int64_t i = 0; i < dead; ++i) ASSERT_EQ(acquire(contender("d"), true, &dying).outcome, Outcome::queued);
  ASSERT_TRUE(lock::release(node, name, dying, a.token, lock::Ending{}));
  LockState granted = state();
  ASSERT_TRUE(granted.held) << "the release granted the lock to the head";
  EXPECT_EQ(granted.holders.at(0).holder.pid, "d");
  ASSERT_TRUE(eventually([&] {
    LockState s = state();
    return !s.held && s.queue_length == 0;
  })) << "the dead head's grant and the waiters' leases lapse";
  Contender b = contender("101");
  ASSERT_EQ(acquire(b, false).outcome, Outcome::acquired);
  LockState s = state();
  EXPECT_EQ(s.holders.at(0).holder.pid, "101");
  EXPECT_EQ(s.queue_length, 0);
}

TEST_F(QueueTest, AWaitStepBehindManyDeadWaitersCallsAgainUntilItHasAnAnswer) {
  Timing dying = timing;
  dying.lease = k_dying_lease;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  const int64_t dead = 3 * k_budget + 5;
  for (int64_t i = 0; i < dead; ++i) ASSERT_EQ(acquire(contender("d"), true, &dying).outcome, Outcome::queued);
  Contender live = contender("200");
  Attempt al = acquire(live);
  ASSERT_EQ(state().queue_length, dead + 1) << "all queued before the first died";
  // The holder's lease ends with nobody to hand it on (no release): the live waiter's own step
  // finds the lock free behind the dead.
  ASSERT_TRUE(lock::extend(node, name, timing, a.token, Millis(50)));
  ASSERT_TRUE(eventually([&] { return state().queue_length == 1 && !state().held; }));

  CountingNode counting(node, name.key_of(lock::Part::queue));
  Attempt got = lock::wait_turn(counting, name, timing, live, al, 20ms);
  EXPECT_EQ(got.outcome, Outcome::acquired);
  ASSERT_GE(counting.codes.size(), 3u);
  EXPECT_EQ(counting.codes.front(), 4) << "the first answer: call again";
  EXPECT_EQ(counting.codes.back(), 1);
  expect_bounded(counting, dead + 1);
}

TEST_F(QueueTest, CancelLeavesTheQueueAndWakesTheOneBehind) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  Attempt ab = acquire(b);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.watch, std::vector<std::string>{b.id()});
  lock::cancel(node, name, timing, b.token, false);
  ASSERT_EQ(state().waiters.size(), 1u);
  EXPECT_EQ(state().waiters.at(0).holder.pid, "102");
  // b's mailbox was pushed: c wakes at once, now at the head.
  auto start = std::chrono::steady_clock::now();
  Attempt next = step(c, ac, 8s);
  EXPECT_EQ(next.outcome, Outcome::queued);
  EXPECT_EQ(next.position, 1);
  EXPECT_EQ(next.watch, std::vector<std::string>{a.id()});
  EXPECT_LT(since(start), 3s);
}

TEST_F(QueueTest, CancelGivesBackAGrantNotYetClaimed) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  acquire(b);
  Attempt ac = acquire(c);
  ASSERT_TRUE(release(a));
  ASSERT_EQ(state().holders.at(0).holder.pid, "101") << "granted to b";
  lock::cancel(node, name, timing, b.token, true);
  EXPECT_EQ(state().holders.at(0).holder.pid, "102") << "handed on to c";
  EXPECT_EQ(step(c, ac).outcome, Outcome::acquired);
}

TEST_F(QueueTest, ANewerSupersedingRequestReplacesTheOlderWaiter) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender plain = contender("101");
  Contender old = contender("102");
  old.supersede = true;
  Contender newer = contender("103");
  newer.supersede = true;
  Attempt ap = acquire(plain);
  Attempt ao = acquire(old);
  ASSERT_EQ(ao.position, 2);

  Attempt an = acquire(newer);
  ASSERT_EQ(an.outcome, Outcome::queued);
  EXPECT_EQ(an.position, 2) << "the older superseding waiter left";
  LockState s = state();
  ASSERT_EQ(s.waiters.size(), 2u);
  EXPECT_EQ(s.waiters[0].holder.pid, "101") << "a waiter without --supersede stays";
  EXPECT_EQ(s.waiters[1].holder.pid, "103");

  // The older one is told at its next step, at once: its mailbox was pushed.
  auto start = std::chrono::steady_clock::now();
  Attempt told = step(old, ao, 8s);
  ASSERT_EQ(told.outcome, Outcome::superseded);
  EXPECT_EQ(told.superseded_by.pid, "103");
  EXPECT_EQ(told.superseded_by.cmd, "cmd 103");
  EXPECT_LT(since(start), 3s);
  EXPECT_EQ(state().queue_length, 2);

  ASSERT_TRUE(release(a));
  EXPECT_EQ(step(plain, ap).outcome, Outcome::acquired);
  ASSERT_TRUE(release(plain));
  EXPECT_EQ(step(newer, an).outcome, Outcome::acquired);
}

// Each superseding request replaces the one before it, a third the second as the second did the
// first; the waiters without --supersede between them keep their places.
class SupersedeTest : public QueueTest {
protected:
  static Contender superseding(const std::string& pid) {
    Contender c = contender(pid);
    c.supersede = true;
    return c;
  }
  // c's next step tells it to leave, naming the request that replaced it.
  void expect_superseded(const Contender& c, const Attempt& last, const std::string& by) {
    Attempt told = step(c, last, 8s);
    EXPECT_EQ(told.outcome, Outcome::superseded) << c.holder.pid;
    EXPECT_EQ(told.superseded_by.pid, by) << c.holder.pid;
  }
  // c's next step finds it still waiting, at position.
  Attempt expect_waiting(const Contender& c, const Attempt& last, int position) {
    Attempt a = step(c, last);
    EXPECT_EQ(a.outcome, Outcome::queued) << c.holder.pid;
    EXPECT_EQ(a.position, position) << c.holder.pid;
    return a;
  }
};

TEST_F(SupersedeTest, EachSupersedingRequestReplacesThePreviousOneAndPlainWaitersStay) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender plain1 = contender("101");
  Contender first = superseding("102");
  Contender plain2 = contender("103");
  Contender second = superseding("104");
  Contender third = superseding("105");
  Attempt ap1 = acquire(plain1);
  Attempt af = acquire(first);
  Attempt ap2 = acquire(plain2);
  ASSERT_EQ(ap2.position, 3);
  Attempt as = acquire(second);
  ASSERT_EQ(as.outcome, Outcome::queued);
  EXPECT_EQ(as.position, 3) << "the first superseding waiter left";
  Attempt at = acquire(third);
  ASSERT_EQ(at.outcome, Outcome::queued);
  EXPECT_EQ(at.position, 3) << "the second superseding waiter left";

  LockState s = state();
  ASSERT_EQ(s.waiters.size(), 3u);
  EXPECT_EQ(s.waiters[0].holder.pid, "101");
  EXPECT_EQ(s.waiters[1].holder.pid, "103");
  EXPECT_EQ(s.waiters[2].holder.pid, "105");

  expect_superseded(first, af, "104");  // the request that replaced it, not the last one
  expect_superseded(second, as, "105");
  ap1 = expect_waiting(plain1, ap1, 1);
  ap2 = expect_waiting(plain2, ap2, 2);
  EXPECT_EQ(state().queue_length, 3) << "a superseded waiter's step does not join the queue again";

  ASSERT_TRUE(release(a));
  ASSERT_EQ(step(plain1, ap1).outcome, Outcome::acquired);
  ASSERT_TRUE(release(plain1));
  ASSERT_EQ(step(plain2, ap2).outcome, Outcome::acquired);
  ASSERT_TRUE(release(plain2));
  EXPECT_EQ(step(third, at).outcome, Outcome::acquired);
}

// A holder that never releases: its lease runs out while waiters are queued, and the lock is free
// until a call hands it on to the head. An attempt that does not wait (-n) must not take it
// then, nor join the queue; the lock goes to the head, whose next step claims it.
TEST_F(QueueTest, AnAttemptThatDoesNotWaitNeverTakesALapsedLockFromTheQueue) {
  Contender a = contender("100", Mode::exclusive, 1, 300ms);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101"), c = contender("102");
  Attempt ab = acquire(b);
  ASSERT_EQ(ab.outcome, Outcome::queued);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.position, 2);
  ASSERT_TRUE(eventually([&] { return call({"EXISTS", name.lock_key()}).integer == 0; })) << "a's lease ran out";
  for (int i = 0; i < 3; ++i) {
    Contender n = contender("200");
    EXPECT_NE(acquire(n, false).outcome, Outcome::acquired) << "attempt " << i << " jumped ahead of the queue";
    EXPECT_NE(call({"GET", name.lock_key()}).str, n.token) << "attempt " << i << " left the lock taken";
    LockState s = state();
    for (const auto& w : s.waiters) EXPECT_NE(w.holder.pid, "200") << "attempt " << i << " queued";
    for (const auto& h : s.holders) EXPECT_NE(h.holder.pid, "200") << "attempt " << i;
  }
  ab = step(b, ab);
  ASSERT_EQ(ab.outcome, Outcome::acquired) << "the head's step hands the lapsed lock on";
  EXPECT_EQ(state().holders.at(0).holder.pid, "101");
  EXPECT_NE(acquire(contender("200"), false).outcome, Outcome::acquired);
  ASSERT_TRUE(release(b));
  ac = step(c, ac);
  EXPECT_EQ(ac.outcome, Outcome::acquired) << "then the next in line";
}

TEST_F(QueueTest, AWaiterWhoseQueueWasLostJoinsItAgain) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  Contender c = contender("102");
  acquire(b);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.position, 2);
  // A failover to a replica that had not seen the queue: it is gone.
  call({"DEL", name.key_of(lock::Part::queue), name.key_of(lock::Part::waiters), name.key_of(lock::Part::leases)});
  ASSERT_EQ(state().queue_length, 0);
  Attempt back = step(c, ac);
  ASSERT_EQ(back.outcome, Outcome::queued);
  EXPECT_EQ(back.position, 1);
  LockState s = state();
  ASSERT_EQ(s.waiters.size(), 1u);
  EXPECT_EQ(s.waiters[0].holder.pid, "102");
  EXPECT_EQ(s.holders.at(0).holder.pid, "100") << "the holder is unaffected";
}

// What a waiter that moved to another master (or whose place a restart lost) sends: its arrival,
// and how long it has waited by its own clock.
Attempt rejoining(Attempt last, const std::string& arrival, Millis waited) {
  last.arrival = arrival;
  last.rejoin_waited = waited;
  return last;
}

int64_t server_us(redis::Reply t) {
  return std::stoll(t.elements.at(0).str) * 1'000'000 + std::stoll(t.elements.at(1).str);
}

// The waiting reply says where the call placed the caller (the queue's score) when it gave it its
// place, and nothing when it only renewed it.
TEST_F(QueueTest, TheWaitingReplyGivesTheArrivalOfAPlaceWhenItIsMade) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender b = contender("101");
  int64_t before = server_us(call({"TIME"}));
  Attempt ab = acquire(b);
  ASSERT_EQ(ab.outcome, Outcome::queued);
  ASSERT_FALSE(ab.arrival.empty());
  EXPECT_EQ(ab.arrival, call({"ZSCORE", name.key_of(lock::Part::queue), b.id()}).str);
  EXPECT_GE(std::stoll(ab.arrival), before);
  EXPECT_LE(std::stoll(ab.arrival), server_us(call({"TIME"})));
  Attempt next = lock::wait_turn(node, name, timing, b, ab, 0ms);
  ASSERT_EQ(next.outcome, Outcome::queued);
  EXPECT_EQ(next.arrival, "") << "a place renewed, not made";
}

// Waiters whose places a failover lost join the new master's queue again in their old order,
// ahead of a request that reached it since, whichever of them steps first there; one that carries
// no arrival (its place may have lapsed for its own reasons) joins at the end.
TEST_F(QueueTest, WaitersWhosePlacesWereLostJoinAgainInTheirOrder) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender w1 = contender("101"), w2 = contender("102"), w3 = contender("103"), late = contender("104");
  Attempt a1 = acquire(w1), a2 = acquire(w2), a3 = acquire(w3);
  ASSERT_EQ(a3.position, 3);
  // A failover to a replica that had not seen the queue: it is gone.
  call({"DEL", name.key_of(lock::Part::queue), name.key_of(lock::Part::waiters), name.key_of(lock::Part::leases)});
  ASSERT_EQ(acquire(late).outcome, Outcome::queued) << "a request that reached the new master since";
  Attempt b3 = lock::wait_turn(node, name, timing, w3, rejoining(a3, a3.arrival, 100ms), 0ms);
  Attempt b2 = lock::wait_turn(node, name, timing, w2, rejoining(a2, a2.arrival, 100ms), 0ms);
  Attempt b1 = lock::wait_turn(node, name, timing, w1, a1, 0ms);  // no arrival: at the end
  ASSERT_EQ(b3.outcome, Outcome::queued);
  EXPECT_EQ(b3.arrival, a3.arrival) << "its old arrival";
  std::vector<std::string> order;
  for (const auto& w : state().waiters) order.push_back(w.holder.pid);
  EXPECT_EQ(order, (std::vector<std::string>{"102", "103", "104", "101"}));
  EXPECT_EQ(b1.position, 4);
  // Served in that order.
  ASSERT_TRUE(release(a));
  EXPECT_EQ(step(w2, b2).outcome, Outcome::acquired);
}

// A waiter that joins again ahead of one already queued wakes that one (twice: the one behind it
// may take a push): it still watches the mailbox of the one before it, whose push at the hand-off
// it would otherwise take, and the grant to the waiter that joined again would wake nobody.
TEST_F(QueueTest, AWaiterThatJoinsAgainAheadOfAnotherWakesIt) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender w1 = contender("101"), w2 = contender("102");
  Attempt a1 = acquire(w1);
  ASSERT_EQ(a1.outcome, Outcome::queued);
  call({"DEL", name.key_of(lock::Part::queue), name.key_of(lock::Part::waiters), name.key_of(lock::Part::leases)});
  Attempt a2 = acquire(w2);
  ASSERT_EQ(a2.outcome, Outcome::queued);
  call({"DEL", name.mailbox(w2.id())});
  Attempt b1 = lock::wait_turn(node, name, timing, w1, rejoining(a1, a1.arrival, 100ms), 0ms);
  ASSERT_EQ(b1.position, 1);
  EXPECT_EQ(call({"LLEN", name.mailbox(w2.id())}).integer, 1) << "the one behind it is woken";
  Attempt s2 = step(w2, a2);
  ASSERT_EQ(s2.position, 2);
  EXPECT_EQ(s2.watch, std::vector<std::string>{w1.id()}) << "and then watches it";
  // At the end, it wakes nobody.
  call({"DEL", name.mailbox(w2.id())});
  Contender w3 = contender("103");
  Attempt a3 = acquire(w3);
  call({"ZREM", name.key_of(lock::Part::queue), w3.id()});
  lock::wait_turn(node, name, timing, w3, rejoining(a3, a3.arrival, 100ms), 0ms);
  EXPECT_EQ(call({"LLEN", name.mailbox(w2.id())}).integer, 0);
}

// A carried arrival is bounded: never later than the server's now, never earlier than the moment
// the waiter started waiting by the server's clock (now less what it has waited, less 1s).
TEST_F(QueueTest, ACarriedArrivalIsNeverAheadOfTheWaitersStartNorLaterThanNow) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender early = contender("101"), future = contender("102");
  Attempt last;
  last.outcome = Outcome::queued;
  int64_t before = server_us(call({"TIME"}));
  Attempt e = lock::wait_turn(node, name, timing, early, rejoining(last, "1000", 2000ms), 0ms);
  int64_t after = server_us(call({"TIME"}));
  ASSERT_EQ(e.outcome, Outcome::queued);
  int64_t at = std::stoll(e.arrival);
  EXPECT_GE(at, before - 3'000'000) << "not before it started waiting (2s) less 1s";
  EXPECT_LE(at, after - 3'000'000);
  Attempt f =
      lock::wait_turn(node, name, timing, future, rejoining(last, std::to_string(after + 60'000'000), 0ms), 0ms);
  ASSERT_EQ(f.outcome, Outcome::queued);
  EXPECT_LE(std::stoll(f.arrival), server_us(call({"TIME"}))) << "not later than now";
  EXPECT_EQ(f.position, 2);
}

// Waiters that take the lock as rlock run does (take_lock: their own steps at their heartbeat, the
// far one behind others), each on its own connection, in a thread.
class TakeQueueTest : public ProtocolTest {
protected:
  using Taken = std::pair<Attempt, std::chrono::steady_clock::time_point>;
  std::future<Taken> take_in_thread(const Contender& who) {
    return std::async(std::launch::async, [b = backend(), n = name, who] {
      lock::WaitLimits wait{Millis(20'000), 0, Millis(1'000)};
      lock::WaitHooks hooks{[](Millis d) {
                              std::this_thread::sleep_for(d);
                              return true;
                            },
                            [] { return false; },
                            {}};
      Attempt got = lock::take_lock(*b, n, wait, who, {}, hooks);
      return std::make_pair(got, std::chrono::steady_clock::now());
    });
  }
  std::vector<std::string> waiting_pids() {
    std::vector<std::string> out;
    for (const auto& w : state().waiters) out.push_back(w.holder.pid);
    return out;
  }
  int64_t zcard_queue() { return call({"ZCARD", name.key_of(lock::Part::queue)}).integer; }
};

// A waiter killed in the middle of the queue (it never steps again, nor leaves): once its lease
// has run out, the waiting ones behind it drop it, and the queue shows the live ones in order;
// they are served in that order, each at once at the release of the one before, and the drained
// queue keeps nothing.
TEST_F(TakeQueueTest, AWaiterKilledInTheQueueIsDroppedAndTheLiveOnesAreServedInOrder) {
  Timing dying = timing;
  dying.lease = 300ms;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender w1 = contender("101"), w2 = contender("102"), w3 = contender("103");
  auto t1 = take_in_thread(w1);
  ASSERT_TRUE(eventually([&] { return state().queue_length == 1; }));
  ASSERT_EQ(acquire(w2, true, &dying).outcome, Outcome::queued);  // then killed: it never steps again
  auto t3 = take_in_thread(w3);
  ASSERT_TRUE(eventually([&] { return state().queue_length == 3 || waiting_pids().size() == 2; }));

  auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] {
    return waiting_pids() == std::vector<std::string>{"101", "103"};
  })) << "w2 is still shown waiting";
  EXPECT_LT(since(killed), dying.lease + timing.far_heartbeat() + 2s) << "within its lease and a heartbeat";
  EXPECT_EQ(state().queue_length, 2);

  ASSERT_TRUE(release(a));
  ASSERT_EQ(t1.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(t1.get().first.outcome, Outcome::acquired);
  EXPECT_EQ(t3.wait_for(100ms), std::future_status::timeout) << "w3 is served after w1 only";
  auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(release(w1));
  ASSERT_EQ(t3.wait_for(5s), std::future_status::ready);
  auto [got, woke] = t3.get();
  EXPECT_EQ(got.outcome, Outcome::acquired);
  EXPECT_LT(woke - released, 1s) << "woken by the release, not at a heartbeat";
  EXPECT_EQ(state().holders.at(0).holder.pid, "103");
  EXPECT_EQ(state().queue_length, 0);
  EXPECT_EQ(zcard_queue(), 0) << "the drained queue keeps no dead entry";
}

// The head of the queue stopped (SIGSTOP) when the lock is handed to it: it never claims the grant.
// The waiter behind it, stepping as rlock run does, gets the lock once the claim window has
// passed, and not long after; the stopped one, continued, finds its grant gone and waits again.
TEST_F(TakeQueueTest, AGrantTheStoppedHeadNeverClaimsGoesToTheWaiterBehindAfterTheClaimWindow) {
  timing.claim = 300ms;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender w1 = contender("101"), w2 = contender("102");
  Attempt stopped = acquire(w1);
  ASSERT_EQ(stopped.outcome, Outcome::queued);
  auto t2 = take_in_thread(w2);
  ASSERT_TRUE(eventually([&] { return state().queue_length == 2; }));

  auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(release(a));
  ASSERT_EQ(t2.wait_for(5s), std::future_status::ready) << "w2 never got the lock";
  auto [got, when] = t2.get();
  EXPECT_EQ(got.outcome, Outcome::acquired);
  EXPECT_GE(when - released, timing.claim - 20ms) << "not before the claim window passed";
  EXPECT_LT(when - released, timing.claim + timing.heartbeat + 2s) << "within the window and a step";
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");

  Attempt late = step(w1, stopped);
  EXPECT_EQ(late.outcome, Outcome::queued);
  EXPECT_EQ(late.position, 1);
}

}  // namespace
}  // namespace rlock::test
