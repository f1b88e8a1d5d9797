// The light heartbeat: an idle waiter behind others renews its place in a few commands while
// nothing changed (wait.lua, view_epoch in common/waiting.lua), and every change, or anything time-based
// that comes due, makes its next step a full one.
#include "protocol.hpp"

#include "lock/scripts.hpp"
#include "util/text.hpp"

#include <algorithm>
#include <map>

namespace rlock::test {
namespace {

using HeartbeatTest = ProtocolTest;
namespace protocol = lock::protocol;

// A Node that passes every call on and records each script's reply code, also of a script sent
// in a pipeline (the light step goes in the BLPOP's), and counts the calls of each kind.
class CodeNode final : public lock::Node {
public:
  explicit CodeNode(lock::Node& inner) : m_inner(inner) {}
  redis::Reply eval(const redis::Script& script, const std::vector<std::string>& keys,
                    const std::vector<std::string>& args, const redis::Undo& undo = {}) override {
    ++evals;
    redis::Reply r = m_inner.eval(script, keys, args, undo);
    record(r);
    return r;
  }
  std::vector<redis::Reply> pipeline(const std::vector<redis::Command>& commands, util::Millis budget = {}) override {
    ++pipelines;
    std::vector<redis::Reply> replies = m_inner.pipeline(commands, budget);
    for (size_t i = 0; i < commands.size() && i < replies.size(); ++i) {
      const std::string& verb = commands[i].at(0);
      if (verb == "FCALL" || verb == "EVALSHA" || verb == "EVAL") record(replies[i]);
    }
    return replies;
  }
  redis::Command script_command(const redis::Script& script, const std::vector<std::string>& keys,
                                const std::vector<std::string>& args) override {
    return m_inner.script_command(script, keys, args);
  }
  std::vector<std::string> scan(const std::string& match) override { return m_inner.scan(match); }
  int64_t wait_replicas(int n, util::Millis timeout) override { return m_inner.wait_replicas(n, timeout); }

  int64_t last() const { return codes.empty() ? -2 : codes.back(); }
  std::vector<int64_t> codes;
  int evals = 0;
  int pipelines = 0;

private:
  // (The light step, beat.lua, replies with its code alone.)
  void record(const redis::Reply& r) {
    if (r.type == redis::Reply::Type::integer) {
      codes.push_back(r.integer);
    } else {
      codes.push_back(r.elements.empty() ? -1 : r.elements[0].integer);
    }
  }

  lock::Node& m_inner;
};

constexpr int64_t k_unchanged = static_cast<int64_t>(protocol::call::beat::Answer::unchanged);
constexpr int64_t k_waiting = static_cast<int64_t>(protocol::call::wait::Answer::waiting);

// The calls of each command the server counted (INFO commandstats), scripts' commands included.
std::map<std::string, int64_t> command_calls(redis::Reply info) {
  std::map<std::string, int64_t> out;
  for (const std::string& line : util::split(info.str, "\n")) {
    if (line.rfind("cmdstat_", 0) != 0) continue;
    size_t colon = line.find(':');
    size_t calls = line.find("calls=");
    if (colon == std::string::npos || calls == std::string::npos) continue;
    out[line.substr(8, colon - 8)] = std::stoll(line.substr(calls + 6));
  }
  return out;
}

TEST_F(HeartbeatTest, AnIdleWaiterBehindOthersRenewsItsPlaceInALightStep) {
  Contender a = contender("100"), b = contender("101"), c = contender("102");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Attempt head = acquire(b);
  ASSERT_EQ(head.position, 1);
  Attempt at = acquire(c);
  ASSERT_EQ(at.outcome, Outcome::queued);
  ASSERT_EQ(at.position, 2);
  ASSERT_FALSE(at.epoch.empty());
  CodeNode counting(node);
  std::string lease_before = call({"ZSCORE", name.lock_key() + ":wl", c.id()}).str;
  std::this_thread::sleep_for(5ms);
  // (On the EVALSHA path, the light step's script is loaded here if no earlier test loaded it: a
  // server without it costs one more request, which FunctionsTest covers.)
  ASSERT_FALSE(call({"SCRIPT", "LOAD", std::string(lock::scripts::k_beat.source)}).is_error());
  ASSERT_EQ(call({"CONFIG", "RESETSTAT"}).str, "OK");
  Attempt next = lock::wait_turn(counting, name, timing, c, at, 20ms);
  std::map<std::string, int64_t> calls = command_calls(call({"INFO", "commandstats"}));
  EXPECT_EQ(counting.last(), k_unchanged) << "nothing changed: the light step";
  EXPECT_EQ(counting.pipelines, 1) << "the light step goes in the BLPOP's pipeline";
  EXPECT_EQ(counting.evals, 0) << "no request of its own";
  EXPECT_EQ(next.outcome, Outcome::queued);
  EXPECT_EQ(next.position, 2);
  EXPECT_EQ(next.queue_length, 2);
  EXPECT_EQ(next.watch, std::vector<std::string>{b.id()});
  EXPECT_EQ(next.holder.pid, "100");
  EXPECT_EQ(next.epoch, at.epoch);
  EXPECT_GT(std::stoll(call({"ZSCORE", name.lock_key() + ":wl", c.id()}).str), std::stoll(lease_before))
      << "the lease was renewed";
  // The script's own commands: GET, TIME, PTTL and ZADD (the BLPOP, the script call and this INFO
  // aside).
  int64_t inside = 0;
  for (const auto& [command, n] : calls) {
    if (command != "blpop" && command != "fcall" && command != "evalsha" && command != "eval" && command != "info" &&
        command != "config|resetstat") {
      inside += n;
    }
  }
  EXPECT_LE(inside, 4) << "commands run by the light step";

  // Again and again while nothing changes; the head's full steps change nothing either.
  for (int i = 0; i < 3; ++i) {
    head = step(b, head, 20ms);
    next = lock::wait_turn(counting, name, timing, c, next, 20ms);
    EXPECT_EQ(counting.last(), k_unchanged) << "step " << i;
  }
}

// beat.lua alone: it renews the caller's lease only while the epoch it sends is current, no lease
// can have run out, and the queue's keys outlive the new lease by the claim window; it never adds
// a place.
TEST_F(HeartbeatTest, TheLightStepRenewsOnlyWhileTheViewHolds) {
  Contender a = contender("100"), b = contender("101"), c = contender("102");
  Attempt at = holder_head_and_behind(a, b, c);
  ASSERT_EQ(at.position, 2);
  const std::string wl = name.lock_key() + ":wl";
  auto beat = [&](const std::string& id, const std::string& epoch, Millis lease) {
    redis::Reply r = node.eval(lock::scripts::k_beat, {wl, name.lock_key() + ":ep"},
                               {id, epoch, std::to_string(lease.count()), std::to_string(timing.claim.count())});
    EXPECT_EQ(r.type, redis::Reply::Type::integer) << r.str;
    return r.integer;
  };
  auto lease_of = [&](const std::string& id) { return call({"ZSCORE", wl, id}).str; };
  constexpr int64_t k_stale = static_cast<int64_t>(protocol::call::beat::Answer::stale);
  std::string before = lease_of(c.id());
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(beat(c.id(), at.epoch, timing.lease), k_unchanged);
  std::string renewed = lease_of(c.id());
  EXPECT_GT(std::stoll(renewed), std::stoll(before));
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(beat(c.id(), at.epoch + "1", timing.lease), k_stale) << "another epoch";
  EXPECT_EQ(beat(c.id(), "", timing.lease), k_stale);
  // The queue's keys expire a lease and a claim window (20s) after the last lease (10s): a lease
  // of 30s would outlive them.
  EXPECT_EQ(beat(c.id(), at.epoch, timing.lease + 20s), k_stale) << "longer than the queue's keys";
  EXPECT_EQ(lease_of(c.id()), renewed) << "no stale step renews";
  EXPECT_EQ(beat("0123456789abcdef", at.epoch, timing.lease), k_stale) << "no place";
  // Due: a lease may have run out since (the epoch's due time is past).
  const std::string ep = name.lock_key() + ":ep";
  std::string view = call({"GET", ep}).str;
  ASSERT_EQ(call({"SET", ep, at.epoch + " 1"}).str, "OK");
  EXPECT_EQ(beat(c.id(), at.epoch, timing.lease), k_stale) << "due";
  ASSERT_EQ(call({"SET", ep, view}).str, "OK");
  EXPECT_EQ(lease_of(c.id()), renewed);
  EXPECT_TRUE(call({"ZSCORE", wl, "0123456789abcdef"}).is_nil()) << "no place added";
  ASSERT_EQ(call({"DEL", name.lock_key() + ":ep"}).integer, 1);
  EXPECT_EQ(beat(c.id(), at.epoch, timing.lease), k_stale) << "no epoch";
  EXPECT_EQ(lease_of(c.id()), renewed);
}

// A waiter behind others is woken by a push when the one ahead leaves: its steps, light or full,
// give it the far lease (and it then steps at the far heartbeat); the head keeps the standard one,
// and so does a preemptor.
TEST_F(HeartbeatTest, AWaiterBehindOthersHasTheFarLease) {
  Timing t = timing;
  t.heartbeat = 2s;  // far: 5s, and a lease 3s longer than the standard one (10s)
  ASSERT_EQ(t.far_lease(), t.lease + 3s);
  Contender a = contender("100"), b = contender("101"), c = contender("102");
  ASSERT_EQ(acquire(a, true, &t).outcome, Outcome::acquired);
  Attempt ab = acquire(b, true, &t);
  Attempt ac = acquire(c, true, &t);
  ASSERT_EQ(ac.position, 2);
  EXPECT_FALSE(ac.far) << "joined by acquire: the standard lease";
  const std::string wl = name.lock_key() + ":wl";
  auto left = [&](const std::string& id) {
    redis::Reply now = call({"TIME"});
    int64_t ms = std::stoll(now.elements.at(0).str) * 1000 + std::stoll(now.elements.at(1).str) / 1000;
    return Millis(std::stoll(call({"ZSCORE", wl, id}).str) - ms);
  };
  EXPECT_LE(left(c.id()), t.lease);
  ab = step(b, ab, 20ms, &t);
  EXPECT_FALSE(ab.far);
  EXPECT_LE(left(b.id()), t.lease) << "the head: the standard lease";
  CodeNode counting(node);
  ac = lock::wait_turn(counting, name, t, c, ac, 20ms);
  EXPECT_EQ(counting.last(), k_unchanged);
  EXPECT_TRUE(ac.far);
  EXPECT_GT(left(c.id()), t.lease + 2s) << "the light step: the far lease";
  // A full step (someone joined behind: the epoch changed) gives it too.
  Contender d = contender("103");
  d.preempt = true;
  Attempt ad = acquire(d, true, &t);
  ASSERT_EQ(ad.position, 1) << "a preemptor goes first";
  ac = lock::wait_turn(counting, name, t, c, ac, 20ms);
  EXPECT_EQ(counting.last(), k_waiting);
  EXPECT_EQ(ac.position, 3);
  EXPECT_TRUE(ac.far);
  EXPECT_GT(left(c.id()), t.lease + 2s) << "the full step: the far lease";
  // The one that was the head is behind the preemptor now: the far lease at its next step.
  ab = step(b, ab, 20ms, &t);
  EXPECT_EQ(ab.position, 2);
  EXPECT_TRUE(ab.far);
  EXPECT_GT(left(b.id()), t.lease + 2s);
  // A preemptor behind another steps at every heartbeat: the standard lease.
  Contender e = contender("104");
  e.preempt = true;
  Attempt ae = acquire(e, true, &t);
  ASSERT_EQ(ae.position, 2);
  ae = step(e, ae, 20ms, &t);
  EXPECT_EQ(ae.position, 2);
  EXPECT_FALSE(ae.far);
  EXPECT_LE(left(e.id()), t.lease);
}

// The head of the queue watches the holder's lease: its heartbeat is light too while that lease
// (and every waiter's) runs, with the standard lease, and the lease left that it keeps counts
// down; at its end the step is a full one, which hands the lock on.
TEST_F(HeartbeatTest, TheHeadTakesTheLightStepUntilTheHoldersLeaseEnds) {
  Contender a = contender("100", Mode::exclusive, 1, 400ms), b = contender("101");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Attempt ab = acquire(b);
  ASSERT_EQ(ab.position, 1);
  ASSERT_TRUE(ab.ttl_left);
  CodeNode counting(node);
  auto start = std::chrono::steady_clock::now();
  Attempt at = lock::wait_turn(counting, name, timing, b, ab, 20ms);
  EXPECT_EQ(counting.last(), k_unchanged) << "the head's heartbeat is light too";
  EXPECT_EQ(at.outcome, Outcome::queued);
  EXPECT_FALSE(at.far) << "the head keeps the standard lease";
  ASSERT_TRUE(at.ttl_left);
  EXPECT_LT(*at.ttl_left, *ab.ttl_left) << "the holder's lease left counts down";
  redis::Reply now = call({"TIME"});
  int64_t ms = std::stoll(now.elements.at(0).str) * 1000 + std::stoll(now.elements.at(1).str) / 1000;
  EXPECT_LE(std::stoll(call({"ZSCORE", name.lock_key() + ":wl", b.id()}).str) - ms, timing.lease.count());
  // a dies (no release): at the end of its lease, the head's step is a full one and takes it.
  while (at.outcome == Outcome::queued && since(start) < 5s) at = lock::wait_turn(counting, name, timing, b, at, 20ms);
  EXPECT_EQ(at.outcome, Outcome::acquired);
  EXPECT_GE(since(start), 250ms) << "not before a's lease ran out";
  EXPECT_EQ(counting.last(), static_cast<int64_t>(protocol::call::wait::Answer::taken));
}

// The light step gives no lease that the queue's keys would not outlive by the claim window.
// Waiters that joined together have the same lease, and the keys expire a lease and a claim window
// after it; a far lease given in the light step would outlive them by less than the claim window
// once more than a lease less the far lease's extra has passed, although no lease has run out yet
// (the epoch's due time): that step must be a full one.
TEST_F(HeartbeatTest, ALightStepGivesNoLeaseTheQueuesKeysWouldNotOutlive) {
  Timing t = timing;
  t.lease = 3s;
  t.claim = 300ms;
  t.heartbeat = 1s;  // far lease: 4.5s; the keys expire 3s + 3.3s after the waiters joined
  ASSERT_EQ(t.far_lease(), 4500ms);
  Contender a = contender("100"), b = contender("101"), c = contender("102");
  ASSERT_EQ(acquire(a, true, &t).outcome, Outcome::acquired);
  ASSERT_EQ(acquire(b, true, &t).position, 1);
  auto joined = std::chrono::steady_clock::now();
  Attempt ac = acquire(c, true, &t);
  ASSERT_EQ(ac.position, 2);
  const std::string wl = name.lock_key() + ":wl";
  auto expiry_and_lease = [&] {
    redis::Reply now = call({"TIME"});
    int64_t ms = std::stoll(now.elements.at(0).str) * 1000 + std::stoll(now.elements.at(1).str) / 1000;
    return std::make_pair(ms + call({"PTTL", wl}).integer, std::stoll(call({"ZSCORE", wl, c.id()}).str));
  };
  // Before 1.5s, the light step; between 1.5s and 3s (b's lease), the full one.
  CodeNode counting(node);
  ac = lock::wait_turn(counting, name, t, c, ac, 20ms);
  EXPECT_EQ(counting.last(), k_unchanged);
  std::this_thread::sleep_until(joined + 2200ms);
  ac = lock::wait_turn(counting, name, t, c, ac, 20ms);
  EXPECT_LT(since(joined), 3s) << "too slow to check: b's lease ran out";
  EXPECT_EQ(counting.last(), k_waiting) << "the full step, which sets the keys' expiries again";
  auto [expiry, lease] = expiry_and_lease();
  EXPECT_LE(lease + t.claim.count(), expiry + 2);
  EXPECT_TRUE(ac.far);
}

TEST_F(HeartbeatTest, SomeoneAheadLeavingMakesTheNextStepAFullOne) {
  Contender a = contender("100"), b = contender("101"), c = contender("102");
  Attempt at = holder_head_and_behind(a, b, c);
  ASSERT_EQ(at.position, 2);
  lock::cancel(node, name, timing, b.token, false);
  // Its push is lost: the step is a heartbeat's, with the old epoch.
  call({"DEL", name.mailbox(b.id()), name.mailbox(c.id())});
  CodeNode counting(node);
  Attempt next = lock::wait_turn(counting, name, timing, c, at, 20ms);
  EXPECT_EQ(counting.last(), k_waiting);
  EXPECT_EQ(next.position, 1);
  EXPECT_EQ(next.queue_length, 1);
  EXPECT_EQ(next.watch, std::vector<std::string>{a.id()});
  EXPECT_NE(next.epoch, at.epoch);
}

// A hand-off (a release that grants the head) keeps the epoch and names the waiter that is the
// queue's head now: its step is a full one (it learns it watches the holder's lease), as is the
// granted one's (it claims); the steps of the waiters behind stay light (their position is the
// one they last read, until a fresh step).
TEST_F(HeartbeatTest, AHandOffMakesOnlyTheNewHeadsStepAFullOne) {
  Contender a = contender("100"), b = contender("101"), c = contender("102"), d = contender("103");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Attempt ab = acquire(b);
  Attempt ac = acquire(c);
  ASSERT_EQ(ac.position, 2);
  Attempt ad = acquire(d);
  ASSERT_EQ(ad.position, 3);
  ASSERT_TRUE(release(a));
  // The pushes are lost: every step is a heartbeat's, with the epoch of its last view.
  call({"DEL", name.mailbox(a.id()), name.mailbox(b.id()), name.mailbox(c.id()), name.mailbox(d.id())});
  CodeNode counting(node);
  Attempt behind = lock::wait_turn(counting, name, timing, d, ad, 20ms);
  EXPECT_EQ(counting.last(), k_unchanged) << "a waiter behind: the light step";
  EXPECT_EQ(behind.position, 3);
  Attempt got = lock::wait_turn(counting, name, timing, b, ab, 20ms);
  EXPECT_EQ(got.outcome, Outcome::acquired) << "the new head: the full step, which claims";
  ac = lock::wait_turn(counting, name, timing, c, ac, 20ms);
  EXPECT_EQ(counting.last(), k_waiting) << "the head now: the full step";
  EXPECT_EQ(ac.position, 1);
  EXPECT_EQ(ac.watch, std::vector<std::string>{b.id()});
  behind = lock::wait_turn(counting, name, timing, d, behind, 20ms);
  EXPECT_EQ(counting.last(), k_unchanged) << "still light behind it: the claim changed nothing for it";
  Attempt now = fresh_step(d, behind);
  EXPECT_EQ(now.position, 2);
  EXPECT_EQ(now.holder.pid, "101");
  EXPECT_EQ(now.epoch, ad.epoch) << "a hand-off keeps the epoch";
}

TEST_F(HeartbeatTest, AWaiterAheadThatDiedIsDroppedByTheNextStepBehindIt) {
  Timing t = timing;
  t.lease = 400ms;
  Contender a = contender("100"), b = contender("101"), c = contender("102");
  ASSERT_EQ(acquire(a, true, &t).outcome, Outcome::acquired);
  ASSERT_EQ(acquire(b, true, &t).outcome, Outcome::queued);
  Attempt at = acquire(c, true, &t);
  ASSERT_EQ(at.position, 2);
  // b never steps again; c keeps stepping, light steps at first, until b is dropped.
  CodeNode counting(node);
  auto start = std::chrono::steady_clock::now();
  while (at.position == 2 && since(start) < 5s) {
    at = lock::wait_turn(counting, name, t, c, at, 20ms);
    ASSERT_EQ(at.outcome, Outcome::queued);
  }
  EXPECT_EQ(at.position, 1) << "b's lease ran out: c moved up";
  EXPECT_EQ(at.watch, std::vector<std::string>{a.id()});
  EXPECT_GE(since(start), 300ms) << "not before b's lease ran out";
  EXPECT_LT(since(start), 2s);
  EXPECT_NE(std::find(counting.codes.begin(), counting.codes.end(), k_unchanged), counting.codes.end())
      << "light steps while b lived";
  EXPECT_TRUE(call({"ZSCORE", name.lock_key() + ":q", b.id()}).is_nil());
}

// The holders' leases are the head's to watch: its step at the end of the holder's lease is a
// full one, which hands the lock on; the step behind it stays light meanwhile.
TEST_F(HeartbeatTest, AHolderWhoseLeaseRunsOutIsHandedOnByTheHeadsStep) {
  Contender a = contender("100", Mode::exclusive, 1, 300ms), b = contender("101"), c = contender("102");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Attempt ab = acquire(b);
  Attempt at = acquire(c);
  ASSERT_EQ(at.position, 2);
  // a dies (no release); b and c keep stepping, and b gets the lock when a's lease runs out.
  CodeNode counting(node);
  auto start = std::chrono::steady_clock::now();
  while (ab.outcome != Outcome::acquired) {
    ASSERT_LT(since(start), 5s) << "the lock was never handed on";
    ab = lock::wait_turn(counting, name, timing, b, ab, 20ms);
    at = lock::wait_turn(counting, name, timing, c, at, 20ms);
  }
  EXPECT_GE(since(start), 200ms);
  EXPECT_NE(std::find(counting.codes.begin(), counting.codes.end(), k_unchanged), counting.codes.end())
      << "light steps while a held it";
  EXPECT_EQ(call({"GET", name.lock_key()}).str, b.token);
}

// A head that died too is dropped by the step behind it once its own lease runs out (here before
// the holder's), and the lock goes to that waiter when the holder's lease ends.
TEST_F(HeartbeatTest, AHolderAndAHeadThatDiedAreHandedOnByTheStepBehind) {
  Timing t = timing;
  t.lease = 300ms;
  Contender a = contender("100", Mode::exclusive, 1, 700ms), b = contender("101"), c = contender("102");
  ASSERT_EQ(acquire(a, true, &t).outcome, Outcome::acquired);
  ASSERT_EQ(acquire(b, true, &t).outcome, Outcome::queued);
  Attempt at = acquire(c, true, &t);
  ASSERT_EQ(at.position, 2);
  auto start = std::chrono::steady_clock::now();
  while (at.outcome != Outcome::acquired) {
    ASSERT_LT(since(start), 5s) << "the lock was never handed on";
    at = lock::wait_turn(node, name, t, c, at, 20ms);
    if (at.position == 1) {
      EXPECT_TRUE(call({"ZSCORE", name.lock_key() + ":q", b.id()}).is_nil()) << "b was dropped";
    }
  }
  EXPECT_GE(since(start), 550ms) << "not before a's lease ran out";
  EXPECT_EQ(call({"GET", name.lock_key()}).str, c.token);
}

}  // namespace
}  // namespace rlock::test
