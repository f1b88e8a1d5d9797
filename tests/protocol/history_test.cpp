// The history the scripts append (PREFIX{KEY}:log), read back through the Backend as status and
// `rlock log` read it.
#include "lock/history.hpp"
#include "protocol.hpp"

namespace rlock::test {
namespace {

using HistoryTest = ProtocolTest;

std::vector<std::string> kinds(const std::vector<lock::Event>& events) {
  std::vector<std::string> out;
  out.reserve(events.size());
  for (const auto& e : events) out.push_back(e.kind);
  return out;
}

TEST_F(HistoryTest, AHoldAndAHandOffAreRecordedWithFenceWaitAndExitStatus) {
  auto b = backend();
  Contender a = contender("100");
  Attempt aa = acquire(a);
  Contender w = contender("101");
  Attempt aw = acquire(w);
  EXPECT_EQ(acquire(contender("102"), false).outcome, Outcome::busy);
  std::this_thread::sleep_for(20ms);
  lock::Ending ending;
  ending.exit_status = "3";
  ending.used = true;  // its command ran: "released" (a hold never used is "returned")
  ending.linger = 0ms;
  ASSERT_TRUE(lock::release(node, name, timing, a.token, ending));
  Attempt got = step(w, aw);
  ASSERT_EQ(got.outcome, Outcome::acquired);

  std::vector<lock::Event> events = b->read_log(name, 100, "");
  ASSERT_EQ(kinds(events), (std::vector<std::string>{"acquired", "busy", "released", "acquired"}));
  EXPECT_EQ(events[0].holder.pid, "100");
  EXPECT_EQ(events[0].fence, aa.fence);
  EXPECT_EQ(events[0].waited_ms, 0);
  EXPECT_EQ(events[0].contender, a.id());
  EXPECT_EQ(events[1].holder.pid, "102");
  EXPECT_EQ(events[2].holder.pid, "100");
  EXPECT_EQ(events[2].exit_status, "3");
  ASSERT_TRUE(events[2].held_ms);
  EXPECT_GE(*events[2].held_ms, 20);
  EXPECT_EQ(events[3].holder.pid, "101");
  EXPECT_EQ(events[3].fence, got.fence);
  ASSERT_TRUE(events[3].waited_ms);
  EXPECT_GE(*events[3].waited_ms, 20);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GE(events[i].time_ms, events[i - 1].time_ms);
  EXPECT_EQ(b->read_log(name, 2, "").size(), 2u) << "the last ones only";
  EXPECT_EQ(kinds(b->read_log(name, 1, events[1].stream_id)), std::vector<std::string>{"released"});
}

// Every busy event names the holder the contender met: a -n attempt's, and a --wait that ran out
// (its waiter leaves the queue) alike.
TEST_F(HistoryTest, EveryBusyEventNamesTheHolder) {
  auto b = backend();
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_EQ(acquire(contender("101"), false).outcome, Outcome::busy);
  Contender w = contender("102");
  ASSERT_EQ(acquire(w).outcome, Outcome::queued);
  lock::cancel(node, name, timing, w.token, true);  // its --wait ran out

  std::vector<lock::Event> events = b->read_log(name, 100, "");
  ASSERT_EQ(kinds(events), (std::vector<std::string>{"acquired", "busy", "busy"}));
  for (size_t i : {size_t{1}, size_t{2}}) {
    EXPECT_EQ(events[i].held_by.pid, "100") << "busy event " << i;
    EXPECT_EQ(events[i].held_by.host, "host") << "busy event " << i;
    EXPECT_EQ(events[i].held_by.cmd, "cmd 100") << "busy event " << i;
    EXPECT_FALSE(events[i].lingering) << "busy event " << i;
  }
  EXPECT_EQ(events[1].holder.pid, "101");
  EXPECT_EQ(events[2].holder.pid, "102");
  EXPECT_TRUE(events[2].waited_ms.has_value()) << "the wait that ran out says how long it was";
}

TEST_F(HistoryTest, ExpiredLostSupersededAndForcedReleasesAreRecorded) {
  auto b = backend();
  Contender a = contender("100", Mode::exclusive, 1, 100ms);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Contender c = contender("101");
  ASSERT_TRUE(eventually([&] { return !state().held; }));
  ASSERT_EQ(acquire(c, false).outcome, Outcome::acquired);
  EXPECT_FALSE(release(a)) << "its lease ran out";

  Contender old = contender("102");
  old.supersede = true;
  Contender newer = contender("103");
  newer.supersede = true;
  Attempt ao = acquire(old);
  acquire(newer);
  EXPECT_EQ(step(old, ao).outcome, Outcome::superseded);
  lock::cancel(node, name, timing, newer.token, true);
  EXPECT_TRUE(b->force_release(name).was_held);

  std::vector<lock::Event> events = b->read_log(name, 100, "");
  ASSERT_EQ(kinds(events),
            (std::vector<std::string>{"acquired", "expired", "acquired", "lost", "superseded", "busy", "released"}));
  EXPECT_EQ(events[1].holder.pid, "100");
  EXPECT_EQ(events[3].holder.pid, "") << "the lost token's caller named nobody";
  EXPECT_EQ(events[4].holder.pid, "102");
  EXPECT_NE(events[4].by.find("103"), std::string::npos);
  EXPECT_EQ(events[5].holder.pid, "103") << "the wait that ran out";
  EXPECT_EQ(events[6].holder.pid, "101");
  EXPECT_EQ(events[6].by, "release --force");
}

TEST_F(HistoryTest, AReleaseRetriedAfterALostAnswerIsRecordedOnce) {
  auto b = backend();
  lock::Ending used;
  used.used = true;
  used.linger = 5s;
  lock::Ending retry = used;
  retry.retry = true;

  // The first attempt ran (the hold lingers under its mark) but its answer was lost: the retry
  // finds its own mark, released.
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, name, timing, a.token, used));
  EXPECT_TRUE(lock::release(node, name, timing, a.token, retry));
  EXPECT_EQ(kinds(b->read_log(name, 100, "")), (std::vector<std::string>{"acquired", "released"}));

  // Gone: a retry looks for its first attempt's record. Found (that attempt released it, and its
  // answer was lost): released, nothing more recorded. Not found (the hold was lost before it):
  // the loss is recorded, once.
  LockName other{"rlock:", name.key + "-other"};
  lock::Ending now = used;
  now.linger = 0ms;
  lock::Ending now_again = now;
  now_again.retry = true;
  Contender c = contender("200");
  ASSERT_EQ(lock::try_acquire(node, other, timing, c, false, {}).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, other, timing, c.token, now));
  EXPECT_TRUE(lock::release(node, other, timing, c.token, now_again));
  EXPECT_EQ(kinds(b->read_log(other, 100, "")), (std::vector<std::string>{"acquired", "released"}));
  Contender d = contender("201");
  ASSERT_EQ(lock::try_acquire(node, other, timing, d, false, {}).outcome, Outcome::acquired);
  call({"DEL", other.lock_key()});
  EXPECT_FALSE(lock::release(node, other, timing, d.token, now_again));
  EXPECT_FALSE(lock::release(node, other, timing, d.token, now_again));
  EXPECT_EQ(kinds(b->read_log(other, 100, "")), (std::vector<std::string>{"acquired", "released", "acquired", "lost"}));
}

// At least log_length events, trimmed in whole stream nodes (MAXLEN ~): with nodes of 2 entries,
// 3 or 4 of the 10.
TEST_F(HistoryTest, TheHistoryKeepsLogLengthEventsOrNone) {
  auto b = backend();
  timing.log_length = 3;
  ASSERT_EQ(call({"CONFIG", "SET", "stream-node-max-entries", "2"}).str, "OK");
  for (int i = 0; i < 5; ++i) {
    Contender c = contender(std::to_string(100 + i));
    ASSERT_EQ(acquire(c).outcome, Outcome::acquired);
    ASSERT_TRUE(release(c));
  }
  ASSERT_EQ(call({"CONFIG", "SET", "stream-node-max-entries", "100"}).str, "OK");
  std::vector<lock::Event> events = b->read_log(name, 100, "");
  ASSERT_GE(events.size(), 3u);
  ASSERT_LE(events.size(), 4u);
  EXPECT_EQ(events.back().holder.pid, "104");

  timing.log_length = 0;
  LockName quiet{"rlock:", name.key + "-quiet"};
  Contender c = contender("200");
  ASSERT_EQ(lock::try_acquire(node, quiet, timing, c, false, {}).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, quiet, timing, c.token, lock::Ending{}));
  EXPECT_TRUE(b->read_log(quiet, 100, "").empty());
}

}  // namespace
}  // namespace rlock::test
