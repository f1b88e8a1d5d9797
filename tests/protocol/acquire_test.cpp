// Acquire, release and extend on one server, read back through inspect.
#include "protocol.hpp"

namespace rlock::test {
namespace {

class AcquireTest : public ProtocolTest {
protected:
  // Runs the scripts of an undo (the release and the leave) once on `on`, as a client that took
  // and gave back a hold before: by EVALSHA, the undo of a connection that ran them goes by
  // EVALSHA too (one that did not: by EVAL, see AnUndoOnAServerThatNeverRanItsScriptsStillRuns).
  void run_the_undo_scripts(lock::Node& on) {
    Contender first = contender("98");
    ASSERT_EQ(lock::try_acquire(on, name, timing, first, false, {}).outcome, Outcome::acquired);
    ASSERT_TRUE(lock::release(on, name, timing, first.token, lock::Ending{}));
    lock::cancel(on, name, timing, first.token, false);
  }
};

TEST_F(AcquireTest, FreeLockIsTakenAndInspectShowsTheHolder) {
  Contender a = contender("101", Mode::exclusive, 1, 20s);
  Attempt got = acquire(a, false);
  ASSERT_EQ(got.outcome, Outcome::acquired);
  EXPECT_GT(got.fence, 0);

  LockState s = state();
  EXPECT_TRUE(s.held);
  EXPECT_EQ(s.mode, Mode::exclusive);
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_EQ(s.holder_count, 1);
  EXPECT_EQ(s.holders[0].holder.pid, "101");
  EXPECT_EQ(s.holders[0].holder.cmd, "cmd 101");
  EXPECT_EQ(s.holders[0].fence, got.fence);
  EXPECT_EQ(s.fence, got.fence);
  EXPECT_EQ(s.holders[0].lease_ms, 20'000);
  ASSERT_TRUE(s.holders[0].ttl_left_ms);
  EXPECT_GT(*s.holders[0].ttl_left_ms, 10'000);
  EXPECT_LE(*s.holders[0].ttl_left_ms, 20'000);
  EXPECT_FALSE(s.limit);
  EXPECT_EQ(s.queue_length, 0);
  EXPECT_TRUE(s.waiters.empty());
}

TEST_F(AcquireTest, HeldLockIsBusyWithoutQueueing) {
  Contender a = contender("101");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Attempt b = acquire(contender("102"), false);
  EXPECT_EQ(b.outcome, Outcome::busy);
  EXPECT_EQ(b.holder.pid, "101");
  ASSERT_TRUE(b.ttl_left);
  EXPECT_GT(b.ttl_left->count(), 0);
  EXPECT_EQ(b.queue_length, 0);
  EXPECT_EQ(state().queue_length, 0);
}

TEST_F(AcquireTest, ReleaseFreesTheLockOnceAndTheNextFenceIsHigher) {
  Contender a = contender("101");
  Attempt first = acquire(a);
  ASSERT_EQ(first.outcome, Outcome::acquired);
  EXPECT_TRUE(release(a));
  EXPECT_FALSE(state().held);
  EXPECT_FALSE(release(a)) << "a second release of the same token";

  Contender b = contender("102");
  Attempt second = acquire(b, false);
  ASSERT_EQ(second.outcome, Outcome::acquired);
  EXPECT_GT(second.fence, first.fence);
  EXPECT_FALSE(release(a)) << "a released token never releases another holder's lock";
  EXPECT_TRUE(state().held);
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
}

// The fence counter is the lock's, not a holder's: a release leaves it, and the next holder's fence
// comes from it, whatever value another holder (or a Redlock merge) left there.
TEST_F(AcquireTest, TheFenceCounterIsSharedByEveryHolderAndOutlivesARelease) {
  ASSERT_EQ(call({"SET", name.fence_key(), "41000"}).str, "OK");
  Contender a = contender("101");
  Attempt got = acquire(a);
  ASSERT_EQ(got.outcome, Outcome::acquired);
  EXPECT_EQ(got.fence, 41001);
  EXPECT_TRUE(release(a));
  EXPECT_EQ(call({"GET", name.fence_key()}).str, "41001");
  EXPECT_EQ(acquire(contender("102")).fence, 41002);
}

// A counter lost (to its idle expiry, or a restart without persistence) starts again from the
// server's clock, above every value it gave out.
TEST_F(AcquireTest, AFenceCounterLostResumesAboveEveryValueItGaveOut) {
  Contender a = contender("101");
  Attempt first = acquire(a);
  ASSERT_EQ(first.outcome, Outcome::acquired);
  EXPECT_TRUE(release(a));
  ASSERT_EQ(call({"DEL", name.fence_key()}).integer, 1);
  Attempt second = acquire(contender("102"));
  ASSERT_EQ(second.outcome, Outcome::acquired);
  EXPECT_GT(second.fence, first.fence);
}

// release --force removes the holder, not the counter: the next holder's fence is still higher.
TEST_F(AcquireTest, AForcedReleaseKeepsTheFenceCounter) {
  Attempt got = acquire(contender("101"));
  ASSERT_EQ(got.outcome, Outcome::acquired);
  EXPECT_TRUE(lock::force_release(node, name, timing).was_held);
  EXPECT_FALSE(state().held);
  EXPECT_EQ(call({"GET", name.fence_key()}).str, std::to_string(got.fence));
  EXPECT_GT(acquire(contender("102")).fence, got.fence);
}

TEST_F(AcquireTest, AnAttemptRepeatedWithTheSameTokenIsOurs) {
  // An earlier attempt whose answer was lost took the lock: the retry finds it held by its token.
  Contender a = contender("101");
  Attempt first = acquire(a);
  Attempt again = acquire(a);
  ASSERT_EQ(again.outcome, Outcome::acquired);
  EXPECT_EQ(again.fence, first.fence);
}

// The server's calls of a command so far (INFO commandstats), e.g. "eval".
int64_t calls_of(redis::Client& client, const std::string& command) {
  std::string stats = client.call({"INFO", "commandstats"}).str;
  std::string line = "cmdstat_" + command + ":calls=";
  size_t at = stats.find(line);
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + line.size()));
}

// An attempt whose answer is lost: the server is held up (a script that runs for `busy`, from
// another client) while the attempt's client, whose requests time out after 100ms, sends it and
// gives up. The server runs it afterwards, then the undo that was sent behind it.
Attempt lost_attempt(lock::Node& slow, const LockName& name, const Timing& timing, const Contender& c,
                     Millis busy = 600ms) {
  std::thread blocker([busy] {
    redis::Client client(redis::parse_url(shared_server().url()), redis::Timeouts{}, redis::TlsOptions{});
    client.call({"EVAL",
                 "local t = redis.call('TIME') local from = t[1] * 1000 + t[2] / 1000 repeat t = redis.call('TIME') "
                 "until t[1] * 1000 + t[2] / 1000 - from >= tonumber(ARGV[1]) return 1",
                 "0", std::to_string(busy.count())});
  });
  std::this_thread::sleep_for(100ms);  // the script runs
  Attempt a;
  EXPECT_THROW(a = lock::try_acquire(slow, name, timing, c, true, {}), Error);
  blocker.join();
  return a;
}

// The undo after an attempt whose answer was lost runs the scripts as every other call does (by
// FCALL, or EVALSHA on Redis 6 or with RLOCK_FUNCTIONS=0, where its connection ran them before),
// not by EVAL of their sources, which would cost the server a parse of tens of kilobytes. The
// hold the lost attempt took is given back, and the history says "returned", as for any hold
// given back unused.
TEST_F(AcquireTest, AHoldWhoseAnswerWasLostIsGivenBackByTheUndoAsReturned) {
  redis::Client slow_client(redis::parse_url(shared_server().url()), redis::Timeouts{1000ms, 100ms},
                            redis::TlsOptions{});
  lock::ClientNode slow(slow_client);
  ASSERT_NO_FATAL_FAILURE(run_the_undo_scripts(slow));
  ASSERT_EQ(lock::try_acquire(slow, name, timing, contender("99"), false, {}).outcome, Outcome::acquired);
  call({"DEL", name.lock_key(), name.key_of(lock::Part::info), name.log_key()});
  int64_t evals = calls_of(slow_client, "eval");

  Contender a = contender("101");
  lost_attempt(slow, name, timing, a);
  ASSERT_TRUE(eventually([&] { return !state().held; }, 2s)) << "the undo gave the hold back";
  EXPECT_EQ(calls_of(slow_client, "eval"), evals + 1) << "the script that held the server up, and no other EVAL";
  std::vector<lock::Event> events = backend()->read_log(name, 100, "");
  std::vector<std::string> kinds;
  for (const auto& e : events) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"acquired", "returned"}));
  if (events.size() == 2) {
    EXPECT_EQ(events[1].holder.pid, "101");
  }
}

// The same for a place in the queue: the undo's leave takes it out, and nothing says "lost".
TEST_F(AcquireTest, APlaceWhoseAnswerWasLostIsLeftByTheUndo) {
  redis::Client slow_client(redis::parse_url(shared_server().url()), redis::Timeouts{1000ms, 100ms},
                            redis::TlsOptions{});
  lock::ClientNode slow(slow_client);
  ASSERT_NO_FATAL_FAILURE(run_the_undo_scripts(slow));
  Contender holder = contender("100");
  ASSERT_EQ(acquire(holder).outcome, Outcome::acquired);
  Contender w = contender("101");
  lost_attempt(slow, name, timing, w);
  ASSERT_TRUE(eventually([&] { return state().queue_length == 0; }, 2s)) << "the undo left the queue";
  EXPECT_TRUE(state().held);
  for (const auto& e : backend()->read_log(name, 100, "")) EXPECT_NE(e.kind, "lost");
}

// A server whose script cache holds the acquire's script but not the release's (flushed, then
// loaded by the lost attempt itself; by EVALSHA, each script is cached apart): the undo still
// gives the hold back, where an EVALSHA of the release would answer NOSCRIPT, unread, and leave
// the hold until its lease ran out. (By FCALL, the library holds every script.)
TEST_F(AcquireTest, AnUndoOnAServerThatNeverRanItsScriptsStillRuns) {
  redis::Client slow_client(redis::parse_url(shared_server().url()), redis::Timeouts{1000ms, 100ms},
                            redis::TlsOptions{});
  lock::ClientNode slow(slow_client);
  call({"SCRIPT", "FLUSH"});
  // (The acquire's script, cached by this connection's first call.)
  ASSERT_EQ(lock::try_acquire(slow, name, timing, contender("99"), false, {}).outcome, Outcome::acquired);
  call({"DEL", name.lock_key(), name.key_of(lock::Part::info), name.log_key()});

  Contender a = contender("101", Mode::exclusive, 1, 60s);
  lost_attempt(slow, name, timing, a);
  ASSERT_TRUE(eventually([&] { return !state().held; }, 2s)) << "the undo gave the hold back";
}

TEST_F(AcquireTest, EnclosingHoldReentersTheLock) {
  Contender outer = contender("101");
  Attempt held = acquire(outer);
  ASSERT_EQ(held.outcome, Outcome::acquired);
  Contender inner = contender("102");
  Attempt in = lock::try_acquire(node, name, timing, inner, true, {lock::new_token(), outer.token});
  ASSERT_EQ(in.outcome, Outcome::reentered);
  EXPECT_EQ(in.fence, held.fence);
  EXPECT_EQ(in.enclosing, 1u);
  EXPECT_EQ(state().queue_length, 0);
}

TEST_F(AcquireTest, ExtendResetsTheLeaseOfItsHolderOnly) {
  Contender a = contender("101", Mode::exclusive, 1, 2s);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);

  std::optional<lock::Extension> e = lock::extend(node, name, timing, a.token, Millis(20'000));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ttl, 20'000ms);
  ASSERT_TRUE(e->ttl_left_before);
  EXPECT_LE(e->ttl_left_before->count(), 2'000);
  LockState s = state();
  EXPECT_GT(*s.holders.at(0).ttl_left_ms, 10'000);
  EXPECT_EQ(s.holders.at(0).lease_ms, 20'000);

  // Without a TTL: the one it was last given.
  e = lock::extend(node, name, timing, a.token, std::nullopt, {lock::KeeperInfo{4242, 4343}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ttl, 20'000ms);
  s = state();
  ASSERT_TRUE(s.holders.at(0).keeper);
  EXPECT_EQ(s.holders.at(0).keeper->keeper, 4242);
  EXPECT_EQ(s.holders.at(0).keeper->watched, 4343);

  EXPECT_FALSE(lock::extend(node, name, timing, lock::new_token(), Millis(20'000))) << "another token";
  ASSERT_TRUE(release(a));
  EXPECT_FALSE(lock::extend(node, name, timing, a.token, Millis(20'000))) << "after the release";
}

// A lease the server shortened behind its holder's back (a step of the server's clock, or a
// PEXPIRE): extend reports what was left of it on the server, which the renewal compares with
// what it expects (tests/unit/renewal_test.cpp warns about the shortfall).
TEST_F(AcquireTest, ExtendReportsTheLeaseLeftOnTheServerEvenWhenShortened) {
  Contender a = contender("101", Mode::exclusive, 1, 20s);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_EQ(call({"PEXPIRE", name.lock_key(), "5000"}).integer, 1);

  std::optional<lock::Extension> e = lock::extend(node, name, timing, a.token, std::nullopt);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->ttl_left_before);
  EXPECT_GT(e->ttl_left_before->count(), 4'000);
  EXPECT_LE(e->ttl_left_before->count(), 5'000);
  EXPECT_EQ(e->ttl, 20'000ms);
}

// A lease that recorded no TTL (its record lost the field) is extended by rlock's default TTL,
// which extend passes to the script.
TEST_F(AcquireTest, ExtendWithoutATtlOfALeaseThatRecordedNoneUsesTheDefault) {
  Contender a = contender("101", Mode::exclusive, 1, 2s);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_EQ(call({"HDEL", name.info_key(), "ttl"}).integer, 1);
  std::optional<lock::Extension> e = lock::extend(node, name, timing, a.token, std::nullopt);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->ttl, lock::k_default_ttl);
  EXPECT_EQ(state().holders.at(0).lease_ms, lock::k_default_ttl.count());
}

TEST_F(AcquireTest, ALeaseThatRunsOutFreesTheLockAndItsHolderLosesIt) {
  Contender a = contender("101", Mode::exclusive, 1, 100ms);
  Attempt first = acquire(a);
  ASSERT_EQ(first.outcome, Outcome::acquired);
  Contender b = contender("102");
  ASSERT_TRUE(eventually([&] { return acquire(b, false).outcome == Outcome::acquired; }));
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
  EXPECT_FALSE(lock::extend(node, name, timing, a.token, std::nullopt));
  EXPECT_FALSE(release(a));
  EXPECT_EQ(state().holders.at(0).holder.pid, "102");
}

// A lease that ran out with nobody taking the lock after it: its token neither extends nor
// releases it, and extend does not bring the lock back.
TEST_F(AcquireTest, AnExpiredLeaseNobodyTookIsNeitherExtendedNorReleased) {
  Contender a = contender("101", Mode::exclusive, 1, 100ms);
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_TRUE(eventually([&] { return call({"EXISTS", name.lock_key()}).integer == 0; }));
  EXPECT_FALSE(lock::extend(node, name, timing, a.token, Millis(10'000)));
  EXPECT_FALSE(lock::extend(node, name, timing, a.token, std::nullopt));
  EXPECT_EQ(call({"EXISTS", name.lock_key()}).integer, 0) << "extend brought the lock back";
  EXPECT_FALSE(state().held);
  EXPECT_FALSE(release(a));
  EXPECT_FALSE(state().held);
}

TEST_F(AcquireTest, ForeignDataAtTheLockIsRefused) {
  call({"HSET", name.lock_key(), "f", "v"});
  try {
    acquire(contender("101"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 65);
  }
}

TEST_F(AcquireTest, AnExclusiveHoldInsideASharedOneOfTheSameTreeIsRefused) {
  Contender outer = contender("100", Mode::shared);
  ASSERT_EQ(acquire(outer).outcome, Outcome::acquired);
  try {
    lock::try_acquire(node, name, timing, contender("101"), true, {outer.token});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 64);
  }
  Attempt inner = lock::try_acquire(node, name, timing, contender("102", Mode::shared), true, {outer.token});
  EXPECT_EQ(inner.outcome, Outcome::reentered);
}

}  // namespace
}  // namespace rlock::test
