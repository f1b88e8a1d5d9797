// Redlock over three redis-servers: phase 1 on every master, the fence merge of phase 2, a master
// that lost the key set again with the fence, and the majority's rule.
#include "lock/node_set.hpp"
#include "protocol.hpp"

#include <signal.h>

#include <optional>
#include <set>
#include <thread>

namespace rlock::test {
namespace {

// The quorum's masters, each looked at once phase 1 has run, and phase 2 (merge.lua) withheld from
// chosen ones (as if they had not answered).
class WatchedMasters final : public lock::NodeSet {
public:
  explicit WatchedMasters(const std::vector<std::string>& urls)
      : m_inner(servers_of(urls).urls, redis::Timeouts{}, redis::TlsOptions{}) {}

  size_t size() const override { return m_inner.size(); }
  std::string name(size_t i) const override { return m_inner.name(i); }
  std::optional<lock::MasterIdentity> identity(size_t i) const override { return m_inner.identity(i); }
  void prepare_acquisition() override { m_inner.prepare_acquisition(); }
  void send_all(const redis::Script& script, const std::vector<std::string>& keys,
                const std::vector<std::vector<std::string>>& args, const std::vector<bool>& which) override {
    m_inner.send_all(script, keys, args, which);
  }
  std::vector<lock::NodeAnswer> eval_all(const redis::Script& script, const std::vector<std::string>& keys,
                                         const std::vector<std::vector<std::string>>& args,
                                         const std::vector<bool>& which) override {
    const bool merge = script.name == "merge";
    std::vector<bool> asked = which;
    if (merge) {
      for (size_t i : no_merge) asked.at(i) = false;
    }
    std::vector<lock::NodeAnswer> answers = m_inner.eval_all(script, keys, args, asked);
    if (merge) {
      for (size_t i : no_merge) {
        if (which.at(i)) answers.at(i).error = Error(69, "phase 2 withheld by the test");
      }
      if (after_merge) after_merge();
    }
    if (script.name == "acquire" && after_phase1) after_phase1();
    return answers;
  }

  std::set<size_t> no_merge;
  std::function<void()> after_phase1;
  std::function<void()> after_merge;

private:
  lock::ClientNodeSet m_inner;
};

class RedlockTest : public testing::Test {
protected:
  static constexpr int k_masters = 3;

  void SetUp() override {
    for (int i = 0; i < k_masters; ++i) {
      clients.push_back(std::make_unique<redis::Client>(redis::parse_url(quorum_server(i).url()), redis::Timeouts{},
                                                        redis::TlsOptions{}));
      ASSERT_EQ(master(i).call({"FLUSHALL"}).str, "OK");
    }
  }

  redis::Client& master(int i) { return *clients.at(static_cast<size_t>(i)); }
  std::vector<std::string> urls() const {
    std::vector<std::string> out;
    out.reserve(k_masters);
    for (int i = 0; i < k_masters; ++i) out.push_back(quorum_server(i).url());
    return out;
  }
  std::unique_ptr<lock::Backend> quorum(std::vector<std::string> masters = {}) const {
    if (masters.empty()) masters = urls();
    return lock::quorum_backend(servers_of(masters), timing, 500ms);
  }
  static Contender contender(const std::string& pid) {
    Contender c;
    c.token = lock::new_token();
    c.ttl = 5s;
    c.holder = {.host = "host", .pid = pid, .user = "user", .cmd = "cmd " + pid};
    return c;
  }
  // The lock as one master alone shows it.
  LockState on(int i) {
    lock::ClientNode node(master(i));
    return lock::inspect(node, name);
  }
  std::string get(int i, const std::string& key) { return master(i).call({"GET", key}).str; }
  int64_t info_fence(int i) { return std::stoll(master(i).call({"HGET", name.info_key(), "fence"}).str); }
  // A release reads the masters' answers only until they decide: a master still to answer runs it
  // a moment later (its whole request is there). Waits until every master has, for a test that
  // then looks at each master on its own.
  void expect_released_everywhere() {
    EXPECT_TRUE(eventually([&] {
      for (int i = 0; i < k_masters; ++i) {
        if (!get(i, name.lock_key()).empty()) return false;
      }
      return true;
    }));
  }

  std::vector<std::unique_ptr<redis::Client>> clients;
  Timing timing = test_timing();
  LockName name{"rlock:", testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(RedlockTest, AcquiresOnEveryMasterWithOneFence) {
  auto q = quorum();
  Contender c = contender("100");
  c.holder.job = "https://ci.example/jobs/81";
  c.holder.note = "release 4.2";
  Attempt got = q->try_acquire(name, c, false, {});
  ASSERT_EQ(got.outcome, Outcome::acquired);
  EXPECT_GT(got.fence, 0);
  for (int i = 0; i < k_masters; ++i) {
    EXPECT_EQ(get(i, name.lock_key()), c.token) << "master " << i;
    EXPECT_EQ(info_fence(i), got.fence) << "master " << i;
    EXPECT_GE(std::stoll(get(i, name.fence_key())), got.fence) << "master " << i;
  }
  LockState s = q->inspect(name, 100);
  EXPECT_TRUE(s.held);
  EXPECT_EQ(s.agreeing, 3);
  ASSERT_EQ(s.masters.size(), 3u);
  EXPECT_EQ(s.holders.at(0).holder.pid, "100");
  EXPECT_EQ(s.holders.at(0).fence, got.fence);

  Attempt busy = q->try_acquire(name, contender("101"), false, {});
  EXPECT_EQ(busy.outcome, Outcome::busy);
  EXPECT_EQ(busy.holder.pid, "100");
  EXPECT_EQ(busy.holder.job, c.holder.job) << "the holder's CI job, as the masters answer it";
  EXPECT_EQ(busy.holder.note, c.holder.note);
  EXPECT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::released);
  EXPECT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::not_held);
  EXPECT_FALSE(q->inspect(name, 100).held);
}

TEST_F(RedlockTest, PhaseTwoRaisesEveryMastersFenceToTheHighest) {
  // Master 2's counter is far ahead (it handed out more fences than the others).
  auto q = quorum();
  Contender first = contender("100");
  ASSERT_EQ(q->try_acquire(name, first, false, {}).outcome, Outcome::acquired);
  ASSERT_EQ(q->release(name, first.token, lock::Ending{}), lock::Released::released);
  expect_released_everywhere();
  const int64_t ahead = std::stoll(get(2, name.fence_key())) + 1'000'000;
  master(2).call({"SET", name.fence_key(), std::to_string(ahead)});

  Contender c = contender("101");
  Attempt got = q->try_acquire(name, c, false, {});
  ASSERT_EQ(got.outcome, Outcome::acquired);
  EXPECT_EQ(got.fence, ahead + 1);
  for (int i = 0; i < k_masters; ++i) {
    EXPECT_EQ(std::stoll(get(i, name.fence_key())), got.fence) << "master " << i;
    EXPECT_EQ(info_fence(i), got.fence) << "master " << i;
  }
  // So the next holder's fence is higher, whichever majority it gets.
  ASSERT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::released);
  expect_released_everywhere();
  lock::ClientNode node0(master(0));
  lock::ClientNode node1(master(1));
  Contender next = contender("102");
  EXPECT_GT(lock::try_acquire(node0, name, timing, next, false, {}).fence, got.fence);
  EXPECT_GT(lock::try_acquire(node1, name, timing, next, false, {}).fence, got.fence);
}

TEST_F(RedlockTest, AFenceEveryMasterHandedOutIsWrittenBackWithoutWaitingYetLandsBeforeTheNextRequest) {
  // After a first hold, whose phase 2 brought the counters (seeded from each master's clock)
  // together, every master hands out the same fence: phase 2 is sent, not waited for.
  auto q = quorum();
  Contender first = contender("100");
  ASSERT_EQ(q->try_acquire(name, first, false, {}).outcome, Outcome::acquired);
  ASSERT_EQ(q->release(name, first.token, lock::Ending{}), lock::Released::released);
  expect_released_everywhere();
  std::set<std::string> counters;
  for (int i = 0; i < k_masters; ++i) counters.insert(get(i, name.fence_key()));
  ASSERT_EQ(counters.size(), 1u);

  Contender c = contender("101");
  Attempt got = q->try_acquire(name, c, false, {});
  ASSERT_EQ(got.outcome, Outcome::acquired);
  EXPECT_EQ(got.fence, std::stoll(*counters.begin()) + 1);
  // The next request on the same connections reads phase 2's answers first, then runs: the
  // release finds every master's lock, and each master's history has the acquisition, before it.
  EXPECT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::released);
  expect_released_everywhere();
  for (int i = 0; i < k_masters; ++i) {
    redis::Reply log = master(i).call({"XREVRANGE", name.log_key(), "+", "-", "COUNT", "2"});
    ASSERT_EQ(log.elements.size(), 2u) << "master " << i;
    auto kind = [](const redis::Reply& entry) { return entry.elements.at(1).elements.at(1).str; };
    EXPECT_EQ(kind(log.elements[0]), "returned") << "master " << i;  // an unused hold given back
    EXPECT_EQ(kind(log.elements[1]), "acquired") << "master " << i;
    EXPECT_EQ(std::stoll(get(i, name.fence_key())), got.fence) << "master " << i;
  }
  EXPECT_EQ(q->try_acquire(name, contender("102"), false, {}).fence, got.fence + 1);
}

TEST_F(RedlockTest, AReleaseWaitsOnlyForTheAnswersThatDecideAndEveryMasterRunsIt) {
  // A per-node timeout far above what the release may take: master 2 is stopped, so a release
  // that waited for it would take all of it.
  auto q = lock::quorum_backend(servers_of(urls()), timing, 5s);
  // The masters ran a release before, from other connections (as after any earlier run): on the
  // EVALSHA path the running masters answer this one at once, not NOSCRIPT after the stopped
  // master's timeout (and the lock's TTL).
  {
    auto before = quorum();
    Contender b = contender("99");
    LockName other{"rlock:", name.key + "-before"};
    ASSERT_EQ(before->try_acquire(other, b, false, {}).outcome, Outcome::acquired);
    ASSERT_EQ(before->release(other, b.token, lock::Ending{}), lock::Released::released);
  }
  Contender c = contender("100");
  ASSERT_EQ(q->try_acquire(name, c, false, {}).outcome, Outcome::acquired);
  // Phase 2's write-back, not waited for on the function path, has run on master 2 and its answer
  // has left (written before the server reads the next request): the release reads it at once.
  ASSERT_TRUE(eventually([&] { return master(2).call({"XLEN", name.log_key()}).integer > 0; }));
  ASSERT_EQ(master(2).call({"PING"}).str, "PONG");
  ASSERT_EQ(::kill(quorum_server(2).pid(), SIGSTOP), 0);
  struct Resume {
    ~Resume() { ::kill(quorum_server(2).pid(), SIGCONT); }
  } resume;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::released);
  // (Only where the connection ran the release's code before: the function library, which the
  // acquire ran; on the EVALSHA path each script is its own, and the first release waits.)
  if (redis::functions_wanted()) {
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms);
  } else {
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 4s) << "NOSCRIPT may come back: the stopped master is waited for";
  }
  EXPECT_EQ(get(0, name.lock_key()), "");
  EXPECT_EQ(get(1, name.lock_key()), "");
  // The stopped master got the whole request: it runs it once it goes on.
  ::kill(quorum_server(2).pid(), SIGCONT);
  EXPECT_TRUE(eventually([&] { return get(2, name.lock_key()).empty(); }));
}

// A master is left unanswered only where its request is sure to run. One that lost rlock's code
// answers the first request "no such function" (or NOSCRIPT), and the release goes on there with
// the code: a release from another process, whose connections are new, waits for that.
TEST_F(RedlockTest, AReleaseGoesOnWhereAMasterLostTheScripts) {
  auto q = quorum();
  Contender c = contender("100");
  ASSERT_EQ(q->try_acquire(name, c, false, {}).outcome, Outcome::acquired);
  ASSERT_EQ(master(2).call({"FUNCTION", "FLUSH"}).str, "OK");
  ASSERT_EQ(master(2).call({"SCRIPT", "FLUSH"}).str, "OK");
  // Master 2 answers last: stopped for a while, so that the others decide first.
  auto other = lock::quorum_backend(servers_of(urls()), timing, 5s);
  ASSERT_EQ(::kill(quorum_server(2).pid(), SIGSTOP), 0);
  std::thread resume([] {
    std::this_thread::sleep_for(300ms);
    ::kill(quorum_server(2).pid(), SIGCONT);
  });
  EXPECT_EQ(other->release(name, c.token, lock::Ending{}), lock::Released::released);
  resume.join();
  // Once a majority has answered, the last master's request, sent in full by EVAL, is not waited
  // for: it runs there, but may not have run yet when release() returns.
  for (int i = 0; i < k_masters; ++i) {
    EXPECT_TRUE(eventually([&] { return get(i, name.lock_key()).empty(); })) << "master " << i;
  }
}

TEST_F(RedlockTest, AWriteBackNotWaitedForDoesNotHoldUpTheEndYetEveryMasterRunsIt) {
  // A first hold brings the counters together: the next phase 2 is sent, not waited for.
  auto q = quorum();
  Contender first = contender("100");
  ASSERT_EQ(q->try_acquire(name, first, false, {}).outcome, Outcome::acquired);
  ASSERT_EQ(q->release(name, first.token, lock::Ending{}), lock::Released::released);
  expect_released_everywhere();

  Contender c = contender("101");
  struct Resume {
    ~Resume() { ::kill(quorum_server(2).pid(), SIGCONT); }
  } resume;
  std::optional<WatchedMasters> masters(std::in_place, urls());  // each master's command timeout: 2s
  // Master 2 stops once phase 1 has answered: phase 2's answer cannot come.
  masters->after_phase1 = [] { ASSERT_EQ(::kill(quorum_server(2).pid(), SIGSTOP), 0); };
  {
    lock::Quorum acquiring(*masters, timing, [] { return util::BootClock::now(); });
    ASSERT_EQ(acquiring.acquire(name, c, {}).attempt.outcome, Outcome::acquired);
  }
  auto t0 = std::chrono::steady_clock::now();
  masters.reset();  // the end of the call: its node set goes
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 1500ms);
  ::kill(quorum_server(2).pid(), SIGCONT);
  // Master 2 got the whole request: it records the acquisition once it goes on.
  EXPECT_TRUE(eventually([&] {
    redis::Reply log = master(2).call({"XREVRANGE", name.log_key(), "+", "-", "COUNT", "1"});
    return log.elements.size() == 1 && log.elements[0].elements.at(1).elements.at(1).str == "acquired";
  }));
  EXPECT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::released);
}

TEST_F(RedlockTest, OnlyAnAcquisitionReadsMoreOfAMasterThanItsIdentity) {
  auto now = [] { return util::BootClock::now(); };
  // A call that does not acquire (an extend, which reads every answer) greets each master with its
  // server section alone: who it is, and whether it is a Cluster node; not its persistence or
  // eviction policy.
  lock::ClientNodeSet extending(servers_of(urls()).urls, redis::Timeouts{}, redis::TlsOptions{});
  lock::Quorum q(extending, timing, now);
  EXPECT_EQ(q.extend(name, lock::new_token(), 5s, 5s, 0).outcome, lock::Quorum::Renewal::lost);
  for (size_t i = 0; i < k_masters; ++i) {
    const lock::ServerFacts* f = extending.facts(i);
    ASSERT_NE(f, nullptr) << "master " << i;
    EXPECT_FALSE(f->run_id.empty()) << "master " << i;
    EXPECT_NE(f->uptime_s, std::nullopt) << "master " << i;
    EXPECT_EQ(f->aof, std::nullopt) << "master " << i;
    EXPECT_EQ(f->maxmemory, std::nullopt) << "master " << i;
  }
  // An acquisition reads that the masters keep an append-only file (so that, young, they count).
  lock::ClientNodeSet acquiring(servers_of(urls()).urls, redis::Timeouts{}, redis::TlsOptions{});
  lock::Quorum a(acquiring, timing, now);
  Contender c = contender("100");
  EXPECT_EQ(a.acquire(name, c, {}).attempt.outcome, Outcome::acquired);
  for (size_t i = 0; i < k_masters; ++i) {
    ASSERT_NE(acquiring.facts(i), nullptr) << "master " << i;
    EXPECT_EQ(acquiring.facts(i)->aof, true) << "master " << i;
  }
  EXPECT_EQ(a.verdict(a.release(name, c.token, lock::Ending{})), lock::Released::released);
}

TEST_F(RedlockTest, AMasterThatLostTheKeyGetsItBackWithTheFenceAtRenewal) {
  auto q = quorum();
  Contender c = contender("100");
  Attempt got = q->try_acquire(name, c, false, {});
  ASSERT_EQ(got.outcome, Outcome::acquired);
  // Master 0 loses everything of the lock (a restart without persistence, as seen by the keys).
  master(0).call({"DEL", name.lock_key(), name.info_key(), name.fence_key()});

  std::optional<lock::Extension> e = q->extend(name, c.token, std::nullopt, c.ttl, got.fence);
  ASSERT_TRUE(e) << "a majority extended";
  EXPECT_EQ(e->ttl, 5s);
  EXPECT_EQ(get(0, name.lock_key()), c.token) << "set again";
  EXPECT_EQ(std::stoll(get(0, name.fence_key())), got.fence) << "with the fence";
  EXPECT_EQ(info_fence(0), got.fence);
  LockState s = on(0);
  ASSERT_TRUE(s.held);
  EXPECT_GT(*s.holders.at(0).ttl_left_ms, 0);
  EXPECT_LE(*s.holders.at(0).ttl_left_ms, 5'000);
  EXPECT_EQ(q->inspect(name, 100).agreeing, 3);
}

// A stopped master (SIGSTOP: it accepts, it never answers) costs a renewal the per-node timeout,
// not the command timeout (2s) nor the lease: the two others renew it.
TEST_F(RedlockTest, ARenewalWithAMasterStoppedWaitsForItThePerNodeTimeoutAndSucceeds) {
  auto q = lock::quorum_backend(servers_of(urls()), timing, 200ms);
  Contender c = contender("100");
  Attempt got = q->try_acquire(name, c, false, {});
  ASSERT_EQ(got.outcome, Outcome::acquired);
  // Phase 2's write-back has run on master 2 before it stops.
  ASSERT_TRUE(eventually([&] { return master(2).call({"XLEN", name.log_key()}).integer > 0; }));
  master(0).call({"PEXPIRE", name.lock_key(), "1000"});
  master(1).call({"PEXPIRE", name.lock_key(), "1000"});
  ASSERT_EQ(::kill(quorum_server(2).pid(), SIGSTOP), 0);
  struct Resume {
    ~Resume() { ::kill(quorum_server(2).pid(), SIGCONT); }
  } resume;
  auto t0 = std::chrono::steady_clock::now();
  std::optional<lock::Extension> e = q->extend(name, c.token, std::nullopt, c.ttl, got.fence);
  Millis took = since(t0);
  ASSERT_TRUE(e) << "the two masters that answer are a majority";
  EXPECT_EQ(e->ttl, 5s);
  EXPECT_LT(took, 1000ms) << "the stopped master was waited for longer than its 200ms";
  for (int i : {0, 1}) {
    EXPECT_GT(master(i).call({"PTTL", name.lock_key()}).integer, 3'000) << "master " << i << ": renewed";
  }
  ::kill(quorum_server(2).pid(), SIGCONT);
  EXPECT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::released);
  expect_released_everywhere();
}

TEST_F(RedlockTest, AHolderOnAMajorityMakesTheLockBusyAndTheAttemptLeavesNothing) {
  Contender other = contender("200");
  for (int i : {1, 2}) {
    lock::ClientNode node(master(i));
    ASSERT_EQ(lock::try_acquire(node, name, timing, other, false, {}).outcome, Outcome::acquired);
  }
  auto q = quorum();
  Contender c = contender("100");
  Attempt got = q->try_acquire(name, c, false, {});
  EXPECT_EQ(got.outcome, Outcome::busy);
  EXPECT_EQ(got.holder.pid, "200");
  EXPECT_FALSE(on(0).held) << "master 0's grant was given back";
  LockState s = q->inspect(name, 100);
  EXPECT_TRUE(s.held);
  EXPECT_EQ(s.holders.at(0).holder.pid, "200");
  EXPECT_EQ(s.agreeing, 2);
}

// --once-per on a quorum: the tick is marked on the masters that extend the hold; a tick run on a
// majority is done, and the masters that granted the loser give it back.
TEST_F(RedlockTest, ATickRunOnAMajorityIsDone) {
  auto q = quorum();
  auto start = util::BootClock::now();
  const Millis period(300'000);
  Contender first = contender("100");
  first.once_per = Contender::OncePer{period, start};
  ASSERT_EQ(q->try_acquire(name, first, false, {}).outcome, Outcome::acquired);
  lock::ExtendNote note;
  note.tick_ran = true;
  ASSERT_TRUE(q->extend(name, first.token, std::nullopt, first.ttl, 0, note));
  ASSERT_EQ(q->release(name, first.token, lock::Ending{"0", first.holder, 0, true, Millis(0)}),
            lock::Released::released);
  expect_released_everywhere();
  // Master 0 lost the record (a restart without persistence, say): it alone would let it run.
  ASSERT_EQ(master(0).call({"DEL", name.key_of(lock::Part::tick)}).integer, 1);

  Contender again = contender("200");
  again.once_per = Contender::OncePer{period, start + 2s};
  Attempt got = q->try_acquire(name, again, false, {});
  EXPECT_EQ(got.outcome, Outcome::done);
  EXPECT_EQ(std::to_string(got.tick), master(1).call({"HGET", name.key_of(lock::Part::tick), "t"}).str);
  EXPECT_EQ(got.holder.host, "host");
  EXPECT_FALSE(on(0).held) << "master 0's grant was given back";
  EXPECT_EQ(master(0).call({"EXISTS", name.key_of(lock::Part::tick)}).integer, 0) << "and it records no tick";

  Contender next = contender("300");
  next.once_per = Contender::OncePer{period, start + period};
  EXPECT_EQ(q->try_acquire(name, next, false, {}).outcome, Outcome::acquired);
}

// The refused masters' holders are told apart by host, pid and command, not by `since`, which is
// each master's own clock when its phase 1 ran: one Redlock holder whose writes landed in
// different milliseconds is one holder with a majority (busy), not several (contended).
TEST_F(RedlockTest, AHolderOnAMajorityIsOneHolderWhateverItsMillisecondsOnEachMaster) {
  Contender other = contender("200");
  for (int i : {1, 2}) {
    lock::ClientNode node(master(i));
    ASSERT_EQ(lock::try_acquire(node, name, timing, other, false, {}).outcome, Outcome::acquired);
    std::this_thread::sleep_for(5ms);  // the two writes land in different milliseconds
  }
  Attempt got = quorum()->try_acquire(name, contender("100"), false, {});
  EXPECT_EQ(got.outcome, Outcome::busy);
  EXPECT_FALSE(got.contended) << "one holder has a majority";
}

TEST_F(RedlockTest, AHolderOnAMinorityDoesNotStopTheMajority) {
  Contender other = contender("200");
  lock::ClientNode node0(master(0));
  ASSERT_EQ(lock::try_acquire(node0, name, timing, other, false, {}).outcome, Outcome::acquired);
  auto q = quorum();
  Contender c = contender("100");
  ASSERT_EQ(q->try_acquire(name, c, false, {}).outcome, Outcome::acquired);
  EXPECT_EQ(get(0, name.lock_key()), other.token) << "the minority's leftover stays until its lease ends";
  LockState s = q->inspect(name, 100);
  EXPECT_EQ(s.holders.at(0).holder.pid, "100");
  EXPECT_EQ(s.agreeing, 2);
  EXPECT_FALSE(s.masters.at(0).agrees);
}

TEST_F(RedlockTest, OneMasterDownStillMakesAMajorityTwoDoNot) {
  std::vector<std::string> one_down = {quorum_server(0).url(), quorum_server(1).url(),
                                       "redis://127.0.0.1:" + std::to_string(unused_port())};
  auto q = quorum(one_down);
  Contender c = contender("100");
  ASSERT_EQ(q->try_acquire(name, c, false, {}).outcome, Outcome::acquired);
  EXPECT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::released);

  std::vector<std::string> two_down = {quorum_server(0).url(), "redis://127.0.0.1:" + std::to_string(unused_port()),
                                       "redis://127.0.0.1:" + std::to_string(unused_port())};
  auto lost = quorum(two_down);
  try {
    lost->try_acquire(name, contender("101"), false, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 69);
  }
  EXPECT_FALSE(on(0).held) << "the lone grant was given back";
}

TEST_F(RedlockTest, ALockGoneFromAMajorityIsLostAtRenewal) {
  auto q = quorum();
  Contender c = contender("100");
  Attempt got = q->try_acquire(name, c, false, {});
  ASSERT_EQ(got.outcome, Outcome::acquired);
  for (int i : {0, 1}) master(i).call({"DEL", name.lock_key()});
  EXPECT_FALSE(q->extend(name, c.token, std::nullopt, c.ttl, got.fence));
  EXPECT_FALSE(on(0).held) << "a lost lock is not set again";
  EXPECT_EQ(q->release(name, c.token, lock::Ending{}), lock::Released::not_held);
}

TEST_F(RedlockTest, AnEnclosingHoldOnAMajorityIsReentered) {
  auto q = quorum();
  Contender outer = contender("100");
  Attempt got = q->try_acquire(name, outer, false, {});
  ASSERT_EQ(got.outcome, Outcome::acquired);
  Attempt inner = q->try_acquire(name, contender("101"), false, {lock::new_token(), outer.token});
  ASSERT_EQ(inner.outcome, Outcome::reentered);
  EXPECT_EQ(inner.fence, got.fence);
  EXPECT_EQ(inner.enclosing, 1u);
}

// --min-hold on a quorum: phase 1 grants for the TTL alone; the minimum starts at phase 2, once a
// majority holds the lock, and a release of the used hold lingers on every master.
TEST_F(RedlockTest, TheMinimumHoldIsRecordedByPhaseTwoNotPhaseOne) {
  WatchedMasters masters(urls());
  lock::Quorum q(masters, timing, [] { return util::BootClock::now(); });
  Contender c = contender("100");
  c.min_hold = 60s;
  std::vector<int64_t> pttl;
  std::vector<std::string> lu;
  masters.after_phase1 = [&] {
    for (int i = 0; i < k_masters; ++i) {
      pttl.push_back(master(i).call({"PTTL", name.lock_key()}).integer);
      lu.push_back(master(i).call({"HGET", name.info_key(), "lu"}).str);
    }
  };
  ASSERT_EQ(q.acquire(name, c, {}).attempt.outcome, Outcome::acquired);
  ASSERT_EQ(pttl.size(), 3u);
  for (int i = 0; i < k_masters; ++i) {
    const auto at = static_cast<size_t>(i);
    EXPECT_GT(pttl[at], 0) << "master " << i;
    EXPECT_LE(pttl[at], c.ttl.count()) << "master " << i << ": phase 1 leased the TTL alone";
    EXPECT_EQ(lu[at], "") << "master " << i;
    EXPECT_GT(master(i).call({"PTTL", name.lock_key()}).integer, 30'000) << "master " << i << ": from phase 2";
    EXPECT_NE(master(i).call({"HGET", name.info_key(), "lu"}).str, "") << "master " << i;
  }

  lock::Ending used;  // the release of an acquire hold
  used.used = true;
  lock::Quorum::Releases r = q.release(name, c.token, used);
  EXPECT_EQ(r.held, 3u);
  for (int i = 0; i < k_masters; ++i) {
    LockState s = on(i);
    ASSERT_TRUE(s.held) << "master " << i;
    EXPECT_TRUE(s.holders.at(0).lingering) << "master " << i;
  }
}

TEST_F(RedlockTest, AFailedAttemptsGiveBackNeverLingersEvenWhereItsMinimumWasRecorded) {
  WatchedMasters masters(urls());
  masters.no_merge = {1, 2};  // phase 2 reaches master 0 alone: no majority
  std::string recorded;
  masters.after_merge = [&] { recorded = master(0).call({"HGET", name.info_key(), "lu"}).str; };
  lock::Quorum q(masters, timing, [] { return util::BootClock::now(); });
  Contender c = contender("100");
  c.min_hold = 60s;
  lock::Quorum::Acquisition got = q.acquire(name, c, {});
  EXPECT_EQ(got.attempt.outcome, Outcome::busy);
  EXPECT_EQ(got.granted, (std::vector<bool>{true, true, true})) << "phase 1 granted everywhere";
  EXPECT_NE(recorded, "") << "master 0 recorded the minimum at phase 2";
  for (int i = 0; i < k_masters; ++i) {
    EXPECT_FALSE(on(i).held) << "master " << i << ": given back, not lingering";
    EXPECT_EQ(master(i).call({"EXISTS", name.lock_key()}).integer, 0) << "master " << i;
  }
  EXPECT_EQ(quorum()->try_acquire(name, contender("101"), false, {}).outcome, Outcome::acquired);
}

}  // namespace
}  // namespace rlock::test
