// The summary the scripts keep beside the history (PREFIX{KEY}:sum), read back through the Backend
// as rlock check and rlock metrics read it.
#include "lock/summary.hpp"
#include "protocol.hpp"

namespace rlock::test {
namespace {

using SummaryTest = ProtocolTest;

using lock::HoldOutcome;

// The end of a run whose command exited with exit_status: by itself (a success for 0, else a
// failure), or as rlock ended it (outcome).
lock::Ending summary_ending(const std::string& exit_status, std::optional<HoldOutcome> outcome = std::nullopt) {
  lock::Ending e;
  e.exit_status = exit_status;
  e.holder = {.host = "host", .pid = "1", .user = "user", .cmd = "cmd"};
  e.used = true;
  e.linger = 0ms;
  e.outcome = outcome.value_or(exit_status == "0" ? HoldOutcome::success : HoldOutcome::failed);
  return e;
}

// The events of the lock's history of one kind.
std::vector<lock::Event> events_of(lock::Backend& b, const LockName& name, const std::string& kind) {
  std::vector<lock::Event> out;
  for (const lock::Event& e : b.read_log(name, 100, "")) {
    if (e.kind == kind) out.push_back(e);
  }
  return out;
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
  none.outcome = HoldOutcome::success;
  ASSERT_TRUE(lock::release(node, name, timing, e.token, none));
  s = b->read_summary(name);
  EXPECT_GE(*s.success.time_ms, first_success);
  EXPECT_EQ(s.success.exit_status, "");
  EXPECT_EQ(s.lost_since_success, 0);
  EXPECT_GT(call({"PTTL", name.summary_key()}).integer, 0) << "it expires with the history";
}

TEST_F(SummaryTest, ASuccessIsACommandThatExitedZeroByItselfInAHoldRlockDidNotEnd) {
  auto b = backend();
  auto end_with = [&](const std::string& pid, const lock::Ending& ending) {
    Contender c = contender(pid);
    EXPECT_EQ(acquire(c).outcome, Outcome::acquired);
    EXPECT_TRUE(lock::release(node, name, timing, c.token, ending));
    return b->read_summary(name);
  };
  lock::Summary s = end_with("100", summary_ending("0"));
  ASSERT_TRUE(s.success.time_ms);
  const int64_t first_success = *s.success.time_ms;
  EXPECT_EQ(s.end.outcome, "ok");
  EXPECT_EQ(s.failed_since_success, 0);

  // Exit 0, but rlock ended it: --max-hold (a command that exits 0 on TERM), its guard killed
  // (no exit status at all). Neither is a success; each is a failure in a row.
  s = end_with("101", summary_ending("0", HoldOutcome::max_hold));
  EXPECT_EQ(s.success.time_ms, first_success) << "--max-hold";
  EXPECT_EQ(s.end.kind, "released");
  EXPECT_EQ(s.end.exit_status, "0");
  EXPECT_EQ(s.end.outcome, "max_hold");
  EXPECT_EQ(s.failed_since_success, 1);
  s = end_with("102", summary_ending("", HoldOutcome::guard_killed));
  EXPECT_EQ(s.success.time_ms, first_success) << "the guard killed";
  EXPECT_EQ(s.end.outcome, "guard_killed");
  EXPECT_EQ(s.failed_since_success, 2);
  // Exit 3 by itself: a failure.
  s = end_with("103", summary_ending("3"));
  EXPECT_EQ(s.success.time_ms, first_success);
  EXPECT_EQ(s.failed_since_success, 3);
  // Stopped for a --preempt request: no success, and no failure either.
  s = end_with("104", summary_ending("143", HoldOutcome::preempted));
  EXPECT_EQ(s.success.time_ms, first_success);
  EXPECT_EQ(s.failed_since_success, 3) << "a preempted hold is no failure";
  EXPECT_EQ(s.lost_since_success, 0);
  // The history says why each ended.
  std::vector<lock::Event> released = events_of(*b, name, "released");
  ASSERT_EQ(released.size(), 5u);
  EXPECT_EQ(released[1].outcome, "max_hold");
  EXPECT_EQ(lock::format_event(released[1], false).find("exit 0 (stopped at --max-hold)") != std::string::npos, true)
      << lock::format_event(released[1], false);

  // A success starts the count over.
  s = end_with("105", summary_ending("0"));
  EXPECT_GT(*s.success.time_ms, first_success);
  EXPECT_EQ(s.failed_since_success, 0);
}

TEST_F(SummaryTest, AHoldGivenBackUnusedDoesNotMoveTheLastStart) {
  auto b = backend();
  // Never used at all: a give-back leaves no start.
  Contender first = contender("100");
  ASSERT_EQ(acquire(first).outcome, Outcome::acquired);
  EXPECT_TRUE(b->read_summary(name).start.time_ms);
  ASSERT_TRUE(release(first));
  lock::Summary s = b->read_summary(name);
  EXPECT_FALSE(s.start.time_ms) << "a run that never started its command did not start";
  EXPECT_EQ(s.count("returned"), 1);

  // Used, then a later hold given back: the last start is the used hold's again.
  Contender a = contender("101");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(lock::release(node, name, timing, a.token, summary_ending("0")));
  s = b->read_summary(name);
  ASSERT_TRUE(s.start.time_ms && s.end.time_ms && s.end.held_ms);
  const int64_t used_start = *s.start.time_ms;
  std::this_thread::sleep_for(5ms);
  Contender c = contender("102");
  c.holder.host = "other-host";
  ASSERT_EQ(acquire(c).outcome, Outcome::acquired);
  EXPECT_GT(*b->read_summary(name).start.time_ms, used_start);
  ASSERT_TRUE(release(c));
  s = b->read_summary(name);
  ASSERT_TRUE(s.start.time_ms);
  // (Put back as the last end's time less its length: within a few ms of when it was taken.)
  EXPECT_EQ(*s.start.time_ms, *s.end.time_ms - *s.end.held_ms);
  EXPECT_NEAR(static_cast<double>(*s.start.time_ms), static_cast<double>(used_start), 5.0);
  EXPECT_EQ(s.start.host, "host");
}

TEST_F(SummaryTest, ALossIsRecordedOnceWhenTheServerAnswersAndAnExpiryCountsAsOne) {
  auto b = backend();
  // Renewals kept failing: the command was stopped, and its release comes once the server
  // answers, with the lock still there. It is a loss, recorded with the holder's length.
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  lock::Ending late = summary_ending("143", HoldOutcome::renewals_failed);
  late.held = 4000ms;
  EXPECT_TRUE(lock::release(node, name, timing, a.token, late)) << "what it still held is given back";
  EXPECT_FALSE(state().held);
  lock::Summary s = b->read_summary(name);
  EXPECT_EQ(s.count("lost"), 1);
  EXPECT_EQ(s.count("released"), 0);
  EXPECT_EQ(s.end.kind, "lost");
  EXPECT_EQ(s.end.held_ms, 4000);
  EXPECT_EQ(s.end.outcome, "renewals_failed");
  EXPECT_EQ(s.lost_since_success, 1);
  EXPECT_EQ(s.failed_since_success, 1);
  std::vector<lock::Event> lost = events_of(*b, name, "lost");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].held_ms, 4000);
  EXPECT_EQ(lost[0].outcome, "renewals_failed");

  // Its lease ran out first and the next holder recorded it expired: a loss too, counted once,
  // whichever records it first; the holder's own record then says how long it ran and why.
  Contender d = contender("101", Mode::exclusive, 1, 100ms);
  ASSERT_EQ(acquire(d).outcome, Outcome::acquired);
  std::this_thread::sleep_for(150ms);
  Contender e = contender("102");
  ASSERT_EQ(acquire(e).outcome, Outcome::acquired);
  s = b->read_summary(name);
  EXPECT_EQ(s.count("expired"), 1);
  EXPECT_EQ(s.end.kind, "expired");
  EXPECT_EQ(s.lost_since_success, 2) << "an expiry is a loss";
  EXPECT_EQ(s.failed_since_success, 2);
  lock::Ending gone = summary_ending("143", HoldOutcome::renewals_failed);
  gone.held = 60ms;
  gone.retry = true;
  EXPECT_FALSE(lock::release(node, name, timing, d.token, gone));
  s = b->read_summary(name);
  EXPECT_EQ(s.lost_since_success, 2) << "counted once";
  EXPECT_EQ(s.failed_since_success, 2);
  EXPECT_EQ(s.end.kind, "lost");
  EXPECT_EQ(s.end.held_ms, 60);
  EXPECT_EQ(s.end.outcome, "renewals_failed");
  lost = events_of(*b, name, "lost");
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_EQ(lost[1].held_ms, 60) << "how long it ran, not its lease";
  // Told again (another attempt whose answer was lost): nothing more.
  EXPECT_FALSE(lock::release(node, name, timing, d.token, gone));
  EXPECT_EQ(events_of(*b, name, "lost").size(), 2u);
  EXPECT_TRUE(release(e));
}

TEST_F(SummaryTest, ARetriedReleaseTellsItsEarlierAttemptFromALoss) {
  auto b = backend();
  // The first attempt released (its answer was lost), and another hold came and went since: the
  // retry finds its record in the history, and reports the release.
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  lock::Ending ending = summary_ending("0");
  ASSERT_TRUE(lock::release(node, name, timing, a.token, ending));
  Contender other = contender("101");
  ASSERT_EQ(acquire(other).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, name, timing, other.token, summary_ending("0")));
  ending.retry = true;
  EXPECT_TRUE(lock::release(node, name, timing, a.token, ending)) << "its own earlier release";
  EXPECT_EQ(b->read_summary(name).count("lost"), 0);

  // The first attempt never reached the server (it was down), and the lease ran out meanwhile:
  // the retry records the loss.
  Contender c = contender("102", Mode::exclusive, 1, 100ms);
  ASSERT_EQ(acquire(c).outcome, Outcome::acquired);
  std::this_thread::sleep_for(150ms);
  lock::Ending lost = summary_ending("0");
  lost.retry = true;
  EXPECT_FALSE(lock::release(node, name, timing, c.token, lost));
  lock::Summary s = b->read_summary(name);
  EXPECT_EQ(s.count("lost"), 1);
  EXPECT_EQ(s.end.kind, "lost");
  EXPECT_EQ(s.end.outcome, "not_owned") << "its holder did not know";
  EXPECT_EQ(s.lost_since_success, 1);
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
