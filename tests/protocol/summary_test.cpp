// The summary the scripts keep beside the history (PREFIX{KEY}:sum), read back through the Backend
// as rlock check and rlock metrics read it.
#include "lock/summary.hpp"
#include "protocol.hpp"

namespace rlock::test {
namespace {

using SummaryTest = ProtocolTest;

lock::Ending summary_ending(const std::string& exit_status) {
  lock::Ending e;
  e.exit_status = exit_status;
  e.holder = {.host = "host", .pid = "1", .user = "user", .cmd = "cmd"};
  e.used = true;
  e.linger = 0ms;
  return e;
}

TEST_F(SummaryTest, CountsEachOutcomeAndKeepsTheLastStartEndAndSuccess) {
  auto b = backend();
  EXPECT_FALSE(b->read_summary(name).present) << "nothing yet";

  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  EXPECT_EQ(acquire(contender("101"), false).outcome, Outcome::busy);
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(lock::release(node, name, timing, a.token, summary_ending("0")));
  lock::Summary s = b->read_summary(name);
  ASSERT_TRUE(s.present);
  ASSERT_TRUE(s.success.time_ms);
  EXPECT_EQ(s.success.exit_status, "0");
  ASSERT_TRUE(s.success.held_ms);
  EXPECT_GE(*s.success.held_ms, 20);
  EXPECT_EQ(s.success.host, "host");
  const int64_t first_success = *s.success.time_ms;
  EXPECT_LE(first_success, s.now_ms);

  // A failure after it: the last end moves on, the last success stays.
  Contender c = contender("102");
  ASSERT_EQ(acquire(c).outcome, Outcome::acquired);
  std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(lock::release(node, name, timing, c.token, summary_ending("3")));
  // A hold lost: released after its lock was taken from it.
  Contender d = contender("103");
  ASSERT_EQ(acquire(d).outcome, Outcome::acquired);
  EXPECT_TRUE(b->force_release(name).was_held);
  EXPECT_FALSE(lock::release(node, name, timing, d.token, summary_ending("0")));

  s = b->read_summary(name);
  EXPECT_EQ(s.count("acquired"), 3);
  EXPECT_EQ(s.count("busy"), 1);
  EXPECT_EQ(s.count("released"), 3) << "two releases and the forced one";
  EXPECT_EQ(s.count("lost"), 1);
  EXPECT_EQ(s.count("preempted"), 0);
  EXPECT_EQ(s.success.time_ms, first_success) << "neither exit 3, nor a forced release, nor a loss is a success";
  EXPECT_EQ(s.end.kind, "lost");
  EXPECT_EQ(s.end.exit_status, "0");
  EXPECT_EQ(s.lost_since_success, 1);
  ASSERT_TRUE(s.start.time_ms);
  EXPECT_GE(*s.start.time_ms, first_success);

  // An acquire hold given back by release, with no command: a success, and the losses start over.
  Contender e = contender("104");
  ASSERT_EQ(acquire(e).outcome, Outcome::acquired);
  lock::Ending none;
  none.used = true;
  none.holder = {.host = "other-host", .pid = "1", .user = "user"};
  ASSERT_TRUE(lock::release(node, name, timing, e.token, none));
  s = b->read_summary(name);
  EXPECT_GE(*s.success.time_ms, first_success);
  EXPECT_EQ(s.success.exit_status, "");
  EXPECT_EQ(s.lost_since_success, 0);
  EXPECT_GT(call({"PTTL", name.summary_key()}).integer, 0) << "it expires with the history";
}

TEST_F(SummaryTest, KeptWithoutAHistoryButNotByTheCleanUpOfAFailedAttempt) {
  auto b = backend();
  timing.log_length = 0;
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, name, timing, a.token, summary_ending("0")));
  EXPECT_TRUE(b->read_log(name, 100, "").empty());
  lock::Summary s = b->read_summary(name);
  EXPECT_EQ(s.count("acquired"), 1);
  EXPECT_EQ(s.count("released"), 1);
  EXPECT_TRUE(s.success.time_ms);

  // A give-back of a token that holds nothing here (a quorum's failed attempt): no loss counted.
  Contender gone = contender("101");
  EXPECT_FALSE(lock::release(node, name, timing.quiet(), gone.token, summary_ending("0")));
  EXPECT_EQ(b->read_summary(name).count("lost"), 0);
  EXPECT_FALSE(lock::release(node, name, timing, gone.token, summary_ending("0")));
  EXPECT_EQ(b->read_summary(name).count("lost"), 1);
}

TEST_F(SummaryTest, AnotherProgramsDataAtTheSummaryNeitherBreaksTheLockNorIsRead) {
  auto b = backend();
  call({"SET", name.summary_key(), "theirs"});
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_TRUE(release(a));
  EXPECT_EQ(call({"GET", name.summary_key()}).str, "theirs");
  try {
    b->read_summary(name);
    ADD_FAILURE() << "read a string as a summary";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 65);
  }
}

TEST_F(SummaryTest, TheLocksWithASummaryAreFoundByScanning) {
  auto b = backend();
  LockName other{"rlock:", name.key + "-other"};
  for (const LockName& n : {name, other}) {
    Contender c = contender("100");
    ASSERT_EQ(lock::try_acquire(node, n, timing, c, false, {}).outcome, Outcome::acquired);
    ASSERT_TRUE(lock::release(node, n, timing, c.token, lock::Ending{}));
  }
  EXPECT_EQ(b->scan_summaries("rlock:", "*"), (std::vector<std::string>{name.key, other.key}));
  EXPECT_TRUE(b->scan_summaries("other:", "*").empty());
}

}  // namespace
}  // namespace rlock::test
