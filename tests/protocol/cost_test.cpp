// What the common calls cost the server: the commands their scripts run (INFO commandstats around
// one call), and the keys they leave with expiries, so that a call that does more than it needs
// shows here.
#include "protocol.hpp"

#include <map>
#include <set>
#include <sstream>

namespace rlock::test {
namespace {

class CostTest : public ProtocolTest {
protected:
  // The commands the server ran since the last reset, by name, less the ones the client sends
  // around a script (the script command itself, loading it, the statistics).
  std::map<std::string, int64_t> commands_run() {
    static const std::set<std::string> around = {
        "fcall", "fcall_ro",      "evalsha",     "eval",   "info",           "config|resetstat", "hello",
        "ping",  "function|load", "script|load", "select", "client|setname", "client|setinfo"};
    std::map<std::string, int64_t> out;
    std::istringstream in(call({"INFO", "commandstats"}).str);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("cmdstat_", 0) != 0) continue;
      std::string command = line.substr(8, line.find(':') - 8);
      auto at = line.find("calls=");
      if (at == std::string::npos || around.count(command) != 0) continue;
      out[command] = std::stoll(line.substr(at + 6));
    }
    return out;
  }

  void reset() { ASSERT_EQ(call({"CONFIG", "RESETSTAT"}).str, "OK"); }

  static int64_t total(const std::map<std::string, int64_t>& run) {
    int64_t n = 0;
    for (const auto& [command, calls] : run) n += calls;
    return n;
  }

  static std::string listing(const std::map<std::string, int64_t>& run) {
    std::string s;
    for (const auto& [command, calls] : run) s += command + "=" + std::to_string(calls) + " ";
    return s;
  }

  int64_t server_us() {
    auto t = call({"TIME"});
    return std::stoll(t.elements.at(0).str) * 1'000'000 + std::stoll(t.elements.at(1).str);
  }

  int64_t pttl(const std::string& key) { return call({"PTTL", key}).integer; }

  // The history and the summary expire within (most - 50 ms, most + slack].
  void expect_history_kept(int64_t most, int64_t slack) {
    for (const std::string& key : {name.log_key(), name.summary_key()}) {
      EXPECT_GT(pttl(key), most - 50) << key;
      EXPECT_LE(pttl(key), most + slack) << key;
    }
  }
};

// The steady state: the lock was used before (its fence counter, summary and history exist).
TEST_F(CostTest, UncontendedAcquireAndReleaseRunAFewCommands) {
  // A used hold released with exit status 0: its end and the success go into the summary.
  lock::Ending ending;
  ending.exit_status = "0";
  ending.holder = {.host = "host", .pid = "101", .user = "user", .cmd = "cmd 101"};
  ending.used = true;
  ending.linger = 0ms;
  ending.outcome = lock::HoldOutcome::success;
  Contender warm = contender("100");
  ASSERT_EQ(acquire(warm, false).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::release(node, name, timing, warm.token, ending));
  Contender a = contender("101");
  reset();
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  auto run = commands_run();
  // TIME, EXISTS (of :info too), SET NX (no GET: the SET says whether the key was free); INCR
  // :fence; PEXPIRE :log and :sum (recorded in :info's hx); HSET, PEXPIRE :info; HINCRBY, HSET
  // :sum; XADD.
  EXPECT_LE(total(run), 11) << listing(run);
  EXPECT_EQ(run.count("get"), 0u) << listing(run);
  EXPECT_EQ(run.count("del"), 0u) << "a free lock's :info is not there to delete: " << listing(run);
  EXPECT_EQ(run.count("hmget"), 0u) << "no :info, no holder to read: " << listing(run);
  EXPECT_EQ(run["pexpire"], 3) << "the fence counter's expiry is not set again: " << listing(run);

  reset();
  ASSERT_TRUE(lock::release(node, name, timing, a.token, ending));
  run = commands_run();
  // TIME, GET, HMGET :info, EXISTS; DEL; HINCRBY, HSET :sum; XADD.
  EXPECT_LE(total(run), 8) << listing(run);
  EXPECT_EQ(run["hset"], 1) << "one HSET of the summary: " << listing(run);
  EXPECT_EQ(run.count("pexpire"), 0u) << "the history was kept by the acquisition: " << listing(run);
}

TEST_F(CostTest, ABusyAttemptReadsTheHolderOnce) {
  Contender a = contender("101");
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  ASSERT_EQ(acquire(contender("100"), false).outcome, Outcome::busy);
  reset();
  Attempt b = acquire(contender("102"), false);
  ASSERT_EQ(b.outcome, Outcome::busy);
  auto run = commands_run();
  // TIME, EXISTS, GET, PTTL, HMGET :info; HINCRBY :sum; XADD.
  EXPECT_LE(total(run), 7) << listing(run);
  EXPECT_EQ(run.count("pexpire"), 0u) << listing(run);
  EXPECT_EQ(run["pttl"], 1) << listing(run);
  EXPECT_EQ(run["hmget"], 1) << listing(run);
  EXPECT_EQ(run.count("hget"), 0u) << listing(run);
  // What it read is what it reports, and the attempt is in the summary and the history.
  EXPECT_EQ(b.holder.pid, "101");
  EXPECT_EQ(b.holder.cmd, "cmd 101");
  ASSERT_TRUE(b.ttl_left);
  EXPECT_GT(b.ttl_left->count(), 20'000);
  EXPECT_EQ(call({"HGET", name.summary_key(), "n.busy"}).str, "2");
  EXPECT_EQ(call({"XLEN", name.log_key()}).integer, 3);
}

// A renewal: the lease and the holder's fields, a keeper's with them, in one HSET of :info.
TEST_F(CostTest, ARenewalRunsAFewCommands) {
  Contender a = contender("101");
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  reset();
  lock::KeeperInfo keeper{4242, 101};
  ASSERT_TRUE(lock::extend(node, name, timing, a.token, Millis(60'000), {keeper}));
  auto run = commands_run();
  // TIME, GET, HMGET, PTTL; PEXPIRE the lock's key; HSET, PEXPIRE :info.
  EXPECT_LE(total(run), 7) << listing(run);
  EXPECT_EQ(run["hset"], 1) << listing(run);
  EXPECT_EQ(call({"HGET", name.info_key(), "keeper"}).str, "4242");
  EXPECT_EQ(call({"HGET", name.info_key(), "watch"}).str, "101");
  EXPECT_EQ(call({"HGET", name.info_key(), "ttl"}).str, "60000");
  EXPECT_GT(call({"PTTL", name.lock_key()}).integer, 30'000);
}

// An attempt that joins the queue goes past the lean path of the uncontended and busy cases: what
// that path read of the lock's key is not read again.
TEST_F(CostTest, AQueuedAttemptReadsTheLockOnce) {
  Contender a = contender("101");
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  reset();
  Attempt b = acquire(contender("102"), true);
  ASSERT_EQ(b.outcome, Outcome::queued);
  auto run = commands_run();
  // GET of the lock's key, and of what waiters see (:ep).
  EXPECT_EQ(run["get"], 2) << listing(run);
  EXPECT_EQ(b.holder.pid, "101");
  EXPECT_EQ(b.position, 1);
}

// The history and the summary last at least the history's time after the last event, at most a
// sixteenth of it more (an hour at most), though not every event sets their expiries.
TEST_F(CostTest, TheHistoryOutlivesItsLastEventWithoutAnExpiryAtEachEvent) {
  Timing t = timing;
  t.history = 1600ms;  // kept 1600 to 1700 ms after the last event
  Contender a = contender("101");
  ASSERT_EQ(acquire(a, false, &t).outcome, Outcome::acquired);
  expect_history_kept(1600, 100);
  const int64_t hx = std::stoll(call({"HGET", name.info_key(), "hx"}).str);
  EXPECT_GE(hx - server_us() / 1000, 1600 - 50);

  // (The first event of a kind may create the summary: its expiry is set.)
  ASSERT_EQ(acquire(contender("102"), false, &t).outcome, Outcome::busy);
  // At once: not set again. Once less than the history's time is left: set again.
  reset();
  ASSERT_EQ(acquire(contender("102"), false, &t).outcome, Outcome::busy);
  EXPECT_EQ(commands_run().count("pexpire"), 0u);
  std::this_thread::sleep_for(250ms);
  reset();
  ASSERT_EQ(acquire(contender("103"), false, &t).outcome, Outcome::busy);
  EXPECT_EQ(commands_run()["pexpire"], 2);
  expect_history_kept(1600, 100);

  // Deleted meanwhile (by hand, by eviction): the next event makes them again, with expiries.
  call({"DEL", name.log_key(), name.summary_key()});
  ASSERT_EQ(acquire(contender("104"), false, &t).outcome, Outcome::busy);
  expect_history_kept(1600, 100);
  EXPECT_EQ(call({"XLEN", name.log_key()}).integer, 1);
  EXPECT_EQ(call({"HGET", name.summary_key(), "n.busy"}).str, "1");

  // The release, then nothing: both are gone after the history's time and the slack.
  ASSERT_TRUE(lock::release(node, name, t, a.token, lock::Ending{}));
  EXPECT_GT(pttl(name.log_key()), 1600 - 50);
  EXPECT_TRUE(eventually([&] { return call({"EXISTS", name.log_key(), name.summary_key()}).integer == 0; }, 3s));
}

TEST_F(CostTest, TheFenceCounterIsSetOnlyWhenMissingOldOrAheadOfTheClock) {
  // Missing: it starts from the server's clock, with an expiry.
  const int64_t before = server_us();
  Contender a = contender("101");
  Attempt first = acquire(a, false);
  ASSERT_EQ(first.outcome, Outcome::acquired);
  EXPECT_GT(first.fence, before);
  EXPECT_GT(pttl(name.fence_key()), 50'000);
  ASSERT_TRUE(release(a));

  // Young: INCR alone; the expiry is left as it was.
  ASSERT_EQ(call({"PEXPIRE", name.fence_key(), "40000"}).integer, 1);
  Attempt second = acquire(contender("102"), false);
  ASSERT_EQ(second.outcome, Outcome::acquired);
  EXPECT_EQ(second.fence, first.fence + 1);
  EXPECT_LE(pttl(name.fence_key()), 40'000);
  EXPECT_GT(pttl(name.fence_key()), 0);
  call({"DEL", name.lock_key()});

  // Older than half the history (60s here), or set by hand: it goes on, its expiry set again.
  const int64_t old = server_us() - 40'000'000;
  call({"SET", name.fence_key(), std::to_string(old), "PX", "20000"});
  Attempt third = acquire(contender("103"), false);
  ASSERT_EQ(third.outcome, Outcome::acquired);
  EXPECT_EQ(third.fence, old + 1);
  EXPECT_GT(pttl(name.fence_key()), 50'000);
  call({"DEL", name.lock_key()});

  // Ahead of the clock (a Redlock merge, a clock stepped back): it goes on from there, and its
  // expiry is set each time.
  const int64_t ahead = server_us() + 3'600'000'000;
  call({"SET", name.fence_key(), std::to_string(ahead), "PX", "20000"});
  Attempt fourth = acquire(contender("104"), false);
  ASSERT_EQ(fourth.outcome, Outcome::acquired);
  EXPECT_EQ(fourth.fence, ahead + 1);
  EXPECT_GT(pttl(name.fence_key()), 50'000);
}

// A hand-off, with waiters behind the one granted: the release reads the holder and the head
// waiter once each, and keeps the epoch (naming the new head) with one read and one write; the
// claim does none of the queue's bookkeeping (the release did it).
TEST_F(CostTest, AHandOffReadsEachThingOnceAndTheClaimLeavesTheQueueAlone) {
  Contender a = contender("100");
  Contender b = contender("101");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Attempt ab = acquire(b);
  ASSERT_EQ(ab.outcome, Outcome::queued);
  ASSERT_EQ(acquire(contender("102")).outcome, Outcome::queued);
  ASSERT_EQ(acquire(contender("103")).outcome, Outcome::queued);
  lock::Ending ending;
  ending.exit_status = "0";
  ending.holder = a.holder;
  ending.used = true;
  ending.linger = 0ms;
  ending.outcome = lock::HoldOutcome::success;
  reset();
  ASSERT_TRUE(lock::release(node, name, timing, a.token, ending));
  auto run = commands_run();
  EXPECT_EQ(run["get"], 2) << "the lock's key, read once, and the epoch: " << listing(run);
  EXPECT_EQ(run["hmget"], 2) << "the holder's :info and the head waiter, once each: " << listing(run);
  EXPECT_EQ(run.count("hget"), 0u) << "no semaphore's limit for an exclusive waiter: " << listing(run);
  EXPECT_EQ(run["del"], 1) << "the holder's keys, in one: " << listing(run);
  EXPECT_EQ(run["set"], 2) << "the grant, and the epoch naming the new head: " << listing(run);
  EXPECT_EQ(run["pexpireat"], 4) << "the queue's keys; no semaphore's, which are not there: " << listing(run);
  EXPECT_LE(total(run), 39) << listing(run);

  reset();
  Attempt taken = step(b, ab);
  ASSERT_EQ(taken.outcome, Outcome::acquired);
  run = commands_run();
  // BLPOP and the light step pipelined behind it (GET :ep, TIME, PTTL, ZADD XX, which finds no
  // place: the push woke it, so the full step follows whatever it said); TIME, GET, HMGET :info;
  // PEXPIRE the lock's key; HSET, PEXPIRE :info; XADD; HINCRBY, HSET :sum.
  EXPECT_LE(total(run), 14) << listing(run);
  EXPECT_EQ(run.count("zrangebyscore"), 0u) << "no reaping: " << listing(run);
  EXPECT_EQ(run.count("zrange"), 0u) << "no expiries of the queue: " << listing(run);
  EXPECT_EQ(run.count("exists"), 0u) << listing(run);
  // What the claim does: the lease, the history, the fence the grant gave; the queue as it was.
  LockState s = state();
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_EQ(s.holders.at(0).holder.pid, "101");
  EXPECT_GT(*s.holders.at(0).ttl_left_ms, 20'000);
  EXPECT_EQ(s.waiters.size(), 2u);
  EXPECT_EQ(call({"HGET", name.info_key(), "claimed"}).str, "1");
  EXPECT_GT(taken.fence, 0);
  EXPECT_EQ(std::to_string(taken.fence), call({"HGET", name.info_key(), "fence"}).str);
  EXPECT_EQ(call({"HGET", name.summary_key(), "n.acquired"}).str, "2");
}

// A waiter's full step (here after a change dropped what waiters see) reads the lock's key, its
// lease, the holder's :info and the semaphore's keys once each, however many parts of the step
// look at them (the claim's check, the view of the holder, the epoch's due time).
TEST_F(CostTest, AWaitersFullStepReadsTheHolderOnce) {
  Contender a = contender("100");
  Contender b = contender("101");
  Contender c = contender("102");
  Attempt ac = holder_head_and_behind(a, b, c);
  ASSERT_EQ(ac.outcome, Outcome::queued);
  Attempt ab = acquire(b);
  ASSERT_EQ(ab.outcome, Outcome::queued);
  for (auto [who, last] : {std::pair{&b, &ab}, std::pair{&c, &ac}}) {
    call({"DEL", name.key_of(lock::Part::epoch)});
    reset();
    Attempt next = step(*who, *last);
    ASSERT_EQ(next.outcome, Outcome::queued);
    EXPECT_EQ(next.holder.pid, "100");
    auto run = commands_run();
    // GET: :ep by the light step, the lock's key, :ep again for the epoch.
    EXPECT_EQ(run["get"], 3) << who->holder.pid << ": " << listing(run);
    EXPECT_EQ(run["pttl"], 1) << who->holder.pid << ": the holder's lease, once: " << listing(run);
    EXPECT_EQ(run["exists"], 2) << who->holder.pid
                                << ": the queue's keys, then the semaphore's, once: " << listing(run);
    // :info (the holder, once), :w (the waiter's own fields; the head's: the one it would grant).
    EXPECT_LE(run["hmget"], 2) << who->holder.pid << ": " << listing(run);
    EXPECT_LE(total(run), 33) << who->holder.pid << ": " << listing(run);
    // What was read once is what the reads it stands for would have read: the head's view of the
    // holder's lease, and the due time of what waiters see, which no lease outlives.
    int64_t expiry_ms = server_us() / 1000 + pttl(name.lock_key()) + 1;
    if (who == &b) {
      ASSERT_TRUE(next.ttl_left.has_value());
      EXPECT_GE(next.ttl_left->count(), pttl(name.lock_key()) - 1);
      EXPECT_LE(next.ttl_left->count(), pttl(name.lock_key()) + 5000);
    }
    std::string ep = call({"GET", name.key_of(lock::Part::epoch)}).str;
    int64_t due = std::stoll(ep.substr(ep.find(' ') + 1));
    EXPECT_GT(due, 0) << ep;
    EXPECT_LE(due, expiry_ms) << ep;
    *last = next;
  }
  EXPECT_EQ(ab.position, 1);
  EXPECT_EQ(ac.position, 2);
}

TEST_F(CostTest, AGrantOverwritesInfoAndDeletesWhatItWouldNotOverwrite) {
  // Leftovers without a holder (a hash written after its holder's :info was evicted, say).
  call({"HSET", name.info_key(), "ps", "1", "pb", "someone", "tk", "5"});
  Contender a = contender("101");
  ASSERT_EQ(acquire(a, false).outcome, Outcome::acquired);
  EXPECT_TRUE(call({"HGET", name.info_key(), "ps"}).is_nil());
  EXPECT_TRUE(call({"HGET", name.info_key(), "pb"}).is_nil());
  EXPECT_TRUE(call({"HGET", name.info_key(), "tk"}).is_nil());
  EXPECT_EQ(call({"HGET", name.info_key(), "pid"}).str, "101");
  EXPECT_GT(pttl(name.info_key()), 60'000) << "kept past the lease";
}

// The eviction check reads INFO once and keeps what it said beside the lock for an hour: a cron
// job run every few minutes pays a GET with its first command, not an INFO and a SET a run.
TEST_F(CostTest, TheEvictionPolicyIsReadOnceAnHour) {
  auto run_once = [&] {
    auto b = backend();
    b->check_eviction_before(name, false);
    Contender a = contender("101");
    ASSERT_EQ(b->try_acquire(name, a, false, {}).outcome, Outcome::acquired);
    b->check_eviction_after(false);
    ASSERT_EQ(b->release(name, a.token, lock::Ending{}), lock::Released::released);
  };
  run_once();
  int64_t kept = pttl(name.policy_key());
  EXPECT_GT(kept, 3'500'000) << "kept an hour";
  reset();
  run_once();
  EXPECT_LE(pttl(name.policy_key()), kept) << "not set again";
  std::istringstream in(call({"INFO", "commandstats"}).str);
  std::string line;
  while (std::getline(in, line)) EXPECT_NE(line.rfind("cmdstat_info:", 0), 0u) << "the second run asked INFO: " << line;
}

// `rlock release` in a script (tok=$(rlock acquire k); ...; rlock release k): its release is its
// process's first request, and whether the server is a Cluster node comes from the same cache,
// read with it: no INFO.
TEST_F(CostTest, AReleaseOnItsOwnAsksNoInfo) {
  auto taker = backend();
  taker->check_eviction_before(name, false);
  Contender a = contender("101");
  ASSERT_EQ(taker->try_acquire(name, a, false, {}).outcome, Outcome::acquired);
  taker->check_eviction_after(false);
  reset();
  auto releaser = backend();
  ASSERT_EQ(releaser->release(name, a.token, lock::Ending{}), lock::Released::released);
  EXPECT_TRUE(call({"EXISTS", name.lock_key()}).integer == 0) << "released";
  std::istringstream in(call({"INFO", "commandstats"}).str);
  std::string line;
  while (std::getline(in, line)) EXPECT_NE(line.rfind("cmdstat_info:", 0), 0u) << "the release asked INFO: " << line;
}

}  // namespace
}  // namespace rlock::test
