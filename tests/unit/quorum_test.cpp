#include "lock/quorum.hpp"
#include "lock/validity.hpp"
#include "util/random.hpp"
#include "fake_clock.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace std::chrono_literals;
using rlock::Error;
using rlock::lock::Attempt;
using rlock::lock::Contender;
using rlock::lock::LockName;
using rlock::lock::MasterIdentity;
using rlock::lock::NodeAnswer;
using rlock::lock::NodeSet;
using rlock::lock::Quorum;
using rlock::redis::Reply;
namespace call = rlock::lock::protocol::call;
using rlock::redis::Script;
using rlock::util::BootClock;
using rlock::util::Millis;

namespace {

Reply integer(int64_t v) { return Reply{Reply::Type::integer, v, {}, {}}; }
Reply text(std::string s) { return Reply{Reply::Type::string, 0, std::move(s), {}}; }
Reply array(std::vector<Reply> e) { return Reply{Reply::Type::array, 0, {}, std::move(e)}; }

// The replies of the lock scripts: {code, more, {ids to push}, payload...}.
Reply answer(int64_t code, std::vector<Reply> payload = {}) {
  std::vector<Reply> e{integer(code), integer(0), array({})};
  e.insert(e.end(), payload.begin(), payload.end());
  return array(std::move(e));
}
Reply granted(int64_t fence) { return answer(1, {integer(fence), text("")}); }
Reply busy(const std::string& holder_pid) {
  return answer(0, {integer(20000), text("host"), text(holder_pid), text("cmd"), text("1000"), integer(2000),
                    integer(0), integer(0), text(""), text("job"), text("note")});
}

// Canned answers: for each script name, one behaviour per node; "late" answers move the clock.
class ScriptedNodes : public NodeSet {
public:
  struct Behaviour {
    std::optional<Reply> reply;  // nullopt: the node fails (down, timed out)
    Millis delay{0};             // how long the whole exchange takes (the slowest counts)
    int error_code = 69;         // the exit code of the failure
  };

  ScriptedNodes(size_t n, FakeClock& clock) : m_n(n), m_clock(clock) {
    // Distinct servers that have run for long and keep nothing on disk, unless a test says.
    for (size_t i = 0; i < n; ++i) identities.push_back(MasterIdentity{"run" + std::to_string(i), 3600, false});
  }
  size_t size() const override { return m_n; }
  std::string name(size_t i) const override { return "m" + std::to_string(i); }
  std::optional<MasterIdentity> identity(size_t i) const override { return identities[i]; }
  std::vector<NodeAnswer> eval_all(const Script& script, const std::vector<std::string>&,
                                   const std::vector<std::vector<std::string>>& args,
                                   const std::vector<bool>& which) override {
    std::vector<NodeAnswer> out(m_n);
    Millis slowest{0};
    for (size_t i = 0; i < m_n; ++i) {
      if (!which[i]) continue;
      calls[std::string(script.name)].push_back({i, args[i]});
      auto& plan = behaviours[std::string(script.name)];
      Behaviour b = i < plan.size() ? plan[i] : Behaviour{answer(1), Millis(0)};
      slowest = std::max(slowest, b.delay);
      if (b.reply) {
        out[i].reply = *b.reply;
      } else {
        out[i].error = Error(b.error_code, "m" + std::to_string(i) + ": no reply within 100ms");
      }
    }
    m_clock.now += slowest;
    return out;
  }

  // Sent without waiting for an answer: recorded, never answered.
  void send_all(const Script& script, const std::vector<std::string>&,
                const std::vector<std::vector<std::string>>& args, const std::vector<bool>& which) override {
    for (size_t i = 0; i < m_n; ++i) {
      if (which[i]) sent[std::string(script.name)].push_back({i, args[i]});
    }
  }

  std::map<std::string, std::vector<Behaviour>> behaviours;
  std::map<std::string, std::vector<std::pair<size_t, std::vector<std::string>>>> calls;
  std::map<std::string, std::vector<std::pair<size_t, std::vector<std::string>>>> sent;
  std::vector<std::optional<MasterIdentity>> identities;

private:
  size_t m_n;
  FakeClock& m_clock;
};

Contender contender(Millis ttl = 10s) {
  Contender c;
  c.token =
      "0123456789abcdef"
      "00112233445566778899aabbccddeeff";
  c.ttl = ttl;
  c.holder = {.host = "host", .pid = "42", .user = "me", .cmd = "cmd"};
  return c;
}

const LockName k_name{"rlock:", "k"};

std::set<size_t> nodes_called(const ScriptedNodes& nodes, const std::string& script) {
  std::set<size_t> out;
  auto it = nodes.calls.find(script);
  if (it == nodes.calls.end()) return out;
  for (const auto& [i, args] : it->second) out.insert(i);
  return out;
}

}  // namespace

TEST(Quorum, AMajorityTakesTheLargestFenceAndWritesItBack) {
  FakeClock clock;
  ScriptedNodes nodes(5, clock);
  nodes.behaviours["acquire"] = {{granted(10)}, {granted(12)}, {std::nullopt}, {granted(11)}, {std::nullopt}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(), {});
  ASSERT_EQ(a.attempt.outcome, Attempt::Outcome::acquired);
  EXPECT_EQ(a.attempt.fence, 12);
  EXPECT_EQ(a.failures.size(), 2u);
  // Phase 2 goes to the masters that granted, with T = 12.
  EXPECT_EQ(nodes_called(nodes, "merge"), (std::set<size_t>{0, 1, 3}));
  for (const auto& [i, args] : nodes.calls["merge"]) EXPECT_EQ(args.at(call::merge::at::fence), "12");
  EXPECT_TRUE(nodes_called(nodes, "release").empty());
}

TEST(Quorum, TooFewAnswersIsUnavailableNeverBusyAndEverythingIsGivenBack) {
  FakeClock clock;
  ScriptedNodes nodes(5, clock);
  nodes.behaviours["acquire"] = {{granted(1)}, {granted(2)}, {std::nullopt}, {std::nullopt}, {std::nullopt}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(), {});
  EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::busy);
  EXPECT_TRUE(a.unavailable);
  EXPECT_FALSE(a.majority_busy);
  ASSERT_EQ(a.failures.size(), 3u);
  EXPECT_NE(a.failures[0].find("m2"), std::string::npos);
  // Released on every master, those that did not answer included.
  EXPECT_EQ(nodes_called(nodes, "release"), (std::set<size_t>{0, 1, 2, 3, 4}));
}

TEST(Quorum, TheMinimumHoldStartsAtPhaseTwoAndAFailedAttemptsGiveBackNeverLingers) {
  FakeClock clock;
  Contender c = contender();
  c.min_hold = Millis(60'000);
  // A majority: phase 2 carries the minimum hold (merge.lua records it there, not phase 1).
  ScriptedNodes held(3, clock);
  held.behaviours["acquire"] = {{granted(1)}, {granted(2)}, {std::nullopt}};
  Quorum q1(held, rlock::lock::Timing{}, [&] { return clock.now; });
  ASSERT_EQ(q1.acquire(k_name, c, {}).attempt.outcome, Attempt::Outcome::acquired);
  ASSERT_EQ(held.calls["merge"].size(), 2u);
  for (const auto& [i, args] : held.calls["merge"]) {
    EXPECT_EQ(args.at(call::merge::at::min_hold), "60000");
  }
  // No majority: the give-back on the master that granted says the hold was never used.
  ScriptedNodes failed(3, clock);
  failed.behaviours["acquire"] = {{granted(1)}, {busy("7")}, {std::nullopt}};
  Quorum q2(failed, rlock::lock::Timing{}, [&] { return clock.now; });
  ASSERT_EQ(q2.acquire(k_name, c, {}).attempt.outcome, Attempt::Outcome::busy);
  ASSERT_EQ(failed.calls["release"].size(), 3u);
  for (const auto& [i, args] : failed.calls["release"]) {
    EXPECT_EQ(args.at(call::release::at::used), "") << "master " << i << ": never used";
    EXPECT_EQ(args.at(call::release::at::retry), "") << "master " << i << ": a first attempt, not a retry";
    EXPECT_EQ(args.at(call::release::at::outcome), "") << "master " << i << ": no outcome, never used";
  }
}

TEST(Quorum, AHolderOnAMajorityIsBusy) {
  FakeClock clock;
  ScriptedNodes nodes(5, clock);
  nodes.behaviours["acquire"] = {{granted(1)}, {busy("7")}, {busy("7")}, {busy("7")}, {granted(2)}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(), {});
  EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::busy);
  EXPECT_FALSE(a.unavailable);
  EXPECT_TRUE(a.majority_busy);
  EXPECT_EQ(a.attempt.holder.pid, "7");
  EXPECT_EQ(a.attempt.holder.job, "job");
  EXPECT_EQ(a.attempt.holder.note, "note");
}

TEST(Quorum, LeftoversOnAMinorityAreNotBusy) {
  // Two masters still hold an earlier attempt's leftovers, one did not answer: no majority for
  // anyone. That is the next attempt's business, not "busy".
  FakeClock clock;
  ScriptedNodes nodes(5, clock);
  nodes.behaviours["acquire"] = {{granted(1)}, {busy("7")}, {busy("7")}, {std::nullopt}, {granted(2)}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(), {});
  EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::busy);
  EXPECT_FALSE(a.unavailable);
  EXPECT_FALSE(a.majority_busy);
  EXPECT_EQ(nodes_called(nodes, "release").size(), 5u);
}

TEST(Quorum, AMajorityThatAnswersTooLateDoesNotCount) {
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  // The answers came after the whole TTL: no validity left.
  nodes.behaviours["acquire"] = {{granted(1), 1000ms}, {granted(2), 1000ms}, {granted(3), 1000ms}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(1000ms), {});
  EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::busy);
  EXPECT_FALSE(a.unavailable);
  EXPECT_EQ(nodes_called(nodes, "release").size(), 3u);
  EXPECT_TRUE(nodes_called(nodes, "merge").empty());
}

TEST(Quorum, ValidityIsTtlMinusElapsedMinusDrift) {
  // TTL 1000ms: drift 1% + 2ms = 12ms. 987ms elapsed leaves 1ms; 988ms leaves nothing.
  for (auto [elapsed, ok] : {std::pair{987ms, true}, std::pair{988ms, false}}) {
    FakeClock clock;
    ScriptedNodes nodes(3, clock);
    nodes.behaviours["acquire"] = {{granted(1), elapsed}, {granted(2)}, {granted(3)}};
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    EXPECT_EQ(q.acquire(k_name, contender(1000ms), {}).attempt.outcome == Attempt::Outcome::acquired, ok)
        << elapsed.count();
  }
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  auto sent = clock.now;
  clock.now += 500ms;
  EXPECT_EQ(q.validity(sent, 1000ms), Millis(1000 - 500 - 12));
}

TEST(Quorum, AFenceNotTakenByAMajorityFailsTheAttempt) {
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  nodes.behaviours["acquire"] = {{granted(5)}, {granted(6)}, {granted(7)}};
  nodes.behaviours["merge"] = {{answer(1)}, {answer(0)}, {std::nullopt}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(), {});
  EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::busy);
  EXPECT_EQ(nodes_called(nodes, "release").size(), 3u);
}

TEST(Quorum, AFenceEveryGrantingMasterHandedOutIsWrittenBackWithoutWaiting) {
  // Each counter is T already: phase 2 only records the acquisition, and nothing waits for it
  // (its answers, here none at all, are read before the next request).
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  nodes.behaviours["acquire"] = {{granted(7)}, {std::nullopt}, {granted(7)}};
  nodes.behaviours["merge"] = {{std::nullopt}, {std::nullopt}, {std::nullopt}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(), {});
  ASSERT_EQ(a.attempt.outcome, Attempt::Outcome::acquired);
  EXPECT_EQ(a.attempt.fence, 7);
  EXPECT_TRUE(nodes_called(nodes, "merge").empty());
  ASSERT_EQ(nodes.sent["merge"].size(), 2u);
  for (const auto& [i, args] : nodes.sent["merge"]) {
    EXPECT_NE(i, 1u);
    EXPECT_EQ(args.at(call::merge::at::fence), "7");
  }
  // With a minimum hold, which starts in phase 2, it is waited for: here it fails.
  FakeClock clock2;
  ScriptedNodes held(3, clock2);
  held.behaviours = nodes.behaviours;
  Quorum q2(held, rlock::lock::Timing{}, [&] { return clock2.now; });
  Contender c = contender();
  c.min_hold = 5s;
  EXPECT_EQ(q2.acquire(k_name, c, {}).attempt.outcome, Attempt::Outcome::busy);
  EXPECT_EQ(nodes_called(held, "merge"), (std::set<size_t>{0, 2}));
  EXPECT_TRUE(held.sent["merge"].empty());
}

TEST(Quorum, RenewalCountsOnlyAMajorityWithinTheValidity) {
  Reply extended = answer(1, {integer(5000), integer(10000), text("")});
  {
    FakeClock clock;
    ScriptedNodes nodes(5, clock);
    nodes.behaviours["extend"] = {{extended}, {extended}, {extended}, {std::nullopt}, {answer(0)}};
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    Quorum::Extended e = q.extend(k_name, contender().token, std::nullopt, 10s, 42);
    EXPECT_EQ(e.outcome, Quorum::Renewal::renewed);
    // The master that lost the key gets it back, with the fence merge (rejoin).
    ASSERT_EQ(nodes_called(nodes, "merge"), (std::set<size_t>{4}));
    EXPECT_EQ(nodes.calls["merge"][0].second.at(call::merge::at::fence), "42");
    EXPECT_EQ(nodes.calls["merge"][0].second.at(call::merge::at::rejoin), "1");
  }
  {
    FakeClock clock;
    ScriptedNodes nodes(5, clock);
    nodes.behaviours["extend"] = {{extended}, {extended}, {std::nullopt}, {std::nullopt}, {answer(0)}};
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    EXPECT_EQ(q.extend(k_name, contender().token, std::nullopt, 10s, 42).outcome, Quorum::Renewal::failed);
  }
  {
    FakeClock clock;
    ScriptedNodes nodes(5, clock);
    nodes.behaviours["extend"] = {{extended}, {answer(0)}, {answer(0)}, {answer(0)}, {std::nullopt}};
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    EXPECT_EQ(q.extend(k_name, contender().token, std::nullopt, 10s, 42).outcome, Quorum::Renewal::lost);
  }
  {
    // A majority that answers after the lease's validity is no renewal.
    FakeClock clock;
    ScriptedNodes nodes(3, clock);
    nodes.behaviours["extend"] = {{extended, 10s}, {extended}, {extended}};
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    EXPECT_EQ(q.extend(k_name, contender().token, std::nullopt, 10s, 42).outcome, Quorum::Renewal::failed);
  }
}

namespace {

// Masters as the scripts treat them: a lock and a fence counter each. A restart without
// persistence loses both; the counter then starts again from the (shared, monotonic) clock in
// microseconds, as the scripts seed it.
class ModelNodes : public NodeSet {
public:
  struct Master {
    std::optional<std::string> owner;
    int64_t fence = 0;
    bool up = true;
  };

  explicit ModelNodes(size_t n) : masters(n) {}
  size_t size() const override { return masters.size(); }
  std::string name(size_t i) const override { return "m" + std::to_string(i); }
  // Each master keeps its run_id across restarts here (the model's restarts test the fence, not
  // the run_id rules, which have tests of their own).
  std::optional<MasterIdentity> identity(size_t i) const override {
    return MasterIdentity{"run" + std::to_string(i), 3600, false};
  }
  std::vector<NodeAnswer> eval_all(const Script& script, const std::vector<std::string>&,
                                   const std::vector<std::vector<std::string>>& args,
                                   const std::vector<bool>& which) override {
    std::vector<NodeAnswer> out(masters.size());
    std::string kind(script.name);
    for (size_t i = 0; i < masters.size(); ++i) {
      if (!which[i]) continue;
      Master& m = masters[i];
      if (!m.up) {
        out[i].error = Error(69, "down");
        continue;
      }
      static_assert(call::acquire::at::token == call::merge::at::token &&
                    call::acquire::at::token == call::release::at::token);
      const std::string& token = args[i].at(call::acquire::at::token);
      if (kind == "acquire") {
        if (m.owner && *m.owner != token) {
          out[i].reply = busy("other");
        } else {
          if (m.fence == 0) m.fence = clock_us;
          m.owner = token;
          out[i].reply = granted(++m.fence);
        }
      } else if (kind == "merge") {
        if (m.owner == token) {
          m.fence = std::max<int64_t>(m.fence, std::stoll(args[i].at(call::merge::at::fence)));
          out[i].reply = answer(1);
        } else {
          out[i].reply = answer(0);
        }
      } else if (kind == "release") {
        bool mine = m.owner == token;
        if (mine) m.owner.reset();
        out[i].reply = answer(mine ? 1 : 0);
      }
    }
    clock_us += 1000;
    return out;
  }

  // A phase 2 sent without waiting may never land (the master went down, the lease ran out
  // first): with `lose_sent`, it never does.
  void send_all(const Script& script, const std::vector<std::string>& keys,
                const std::vector<std::vector<std::string>>& args, const std::vector<bool>& which) override {
    if (!lose_sent) eval_all(script, keys, args, which);
  }

  std::vector<Master> masters;
  int64_t clock_us = 1'700'000'000'000'000;
  bool lose_sent = false;
};

}  // namespace

TEST(Quorum, FencesIncreaseStrictlyAcrossFailuresAndRestarts) {
  // Holders one after another; before each attempt, masters go down, come back and restart
  // (losing their lock and counter) at random. Every acquisition's fence must exceed the last.
  // A lease also runs out on a master now and then (its counter stays); and with lose_sent, no
  // phase 2 sent without waiting ever lands.
  for (auto [n, lose_sent] : {std::pair{3u, false}, {5u, false}, {3u, true}, {5u, true}}) {
    ModelNodes nodes(n);
    nodes.lose_sent = lose_sent;
    FakeClock clock;
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    int64_t last = 0;
    int acquired = 0;
    for (int round = 0; round < 2000; ++round) {
      for (auto& m : nodes.masters) {
        uint64_t dice = rlock::util::random_below(20);
        if (dice == 0) m.up = !m.up;
        if (dice == 1) m = ModelNodes::Master{};  // a restart without persistence
        if (dice == 2) m.owner.reset();           // the lease ran out there
      }
      Contender c = contender();
      c.token = rlock::util::random_hex(24);
      Quorum::Acquisition a = q.acquire(k_name, c, {});
      if (a.attempt.outcome != Attempt::Outcome::acquired) continue;
      ++acquired;
      EXPECT_GT(a.attempt.fence, last) << "round " << round;
      last = a.attempt.fence;
      q.release(k_name, c.token, {});
    }
    EXPECT_GT(acquired, 500) << n;
  }
}

TEST(Quorum, AReleaseProvesOnlyWhatAMajoritySays) {
  // 5 masters. A loss is proved only when a majority says "not held"; a master that timed out
  // proves nothing, whatever the others say.
  struct Case {
    std::vector<std::optional<int64_t>> answers;    // 1 held, 0 not held, nullopt timed out
    std::optional<rlock::lock::Released> expected;  // nullopt: 69, no majority answered
  };
  using R = rlock::lock::Released;
  std::vector<Case> cases = {
      {{1, 1, 1, 0, 0}, R::released},
      {{0, 0, 0, 1, 1}, R::not_held},
      {{1, 1, 0, std::nullopt, std::nullopt}, R::unknown},
      {{1, 0, 0, std::nullopt, 1}, R::unknown},
      {{0, 0, std::nullopt, std::nullopt, std::nullopt}, std::nullopt},
  };
  for (const Case& c : cases) {
    FakeClock clock;
    ScriptedNodes nodes(5, clock);
    for (const auto& a : c.answers) {
      nodes.behaviours["release"].push_back({a ? std::optional<Reply>(answer(*a)) : std::nullopt, Millis(0)});
    }
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    Quorum::Releases r = q.release(k_name, contender().token, {});
    if (c.expected) {
      EXPECT_EQ(q.verdict(r), *c.expected);
    } else {
      EXPECT_THROW(q.verdict(r), Error);
    }
  }
}

TEST(Quorum, OneServerNamedTwiceIsRefusedAndNothingIsLeftTaken) {
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  nodes.identities[2] = nodes.identities[0];  // redis://127.0.0.1:P and redis://localhost:P
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  try {
    q.acquire(k_name, contender(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 78);
    EXPECT_NE(std::string(e.what()).find("m0 and m2 are one server"), std::string::npos) << e.what();
  }
  EXPECT_EQ(nodes_called(nodes, "release").size(), 3u);
}

TEST(Quorum, AMasterYoungerThanTheTtlWithoutPersistenceDoesNotCount) {
  // 3 masters; m1 and m2 just restarted empty (they may have lost another holder's lock): only
  // m0 counts, no majority.
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  nodes.identities[1] = MasterIdentity{"new1", 2, false};
  nodes.identities[2] = MasterIdentity{"new2", 2, false};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(10s), {});
  EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::busy);
  EXPECT_EQ(nodes_called(nodes, "release").size(), 3u);
  // Once they have run a TTL, or with appendonly, they count.
  nodes.identities[1] = MasterIdentity{"new1", 10, false};
  nodes.identities[2] = MasterIdentity{"new2", 2, true};
  EXPECT_EQ(q.acquire(k_name, contender(10s), {}).attempt.outcome, Attempt::Outcome::acquired);
}

TEST(Quorum, AMasterRestartedDuringTheHoldNoLongerCounts) {
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  ASSERT_EQ(q.acquire(k_name, contender(), {}).attempt.outcome, Attempt::Outcome::acquired);
  // m1 and m2 restarted (new run_ids). Their answers count neither way: m1's "not held" proves
  // no loss, m2's "extended" (it was set again) proves no renewal.
  nodes.identities[1] = MasterIdentity{"again1", 1, false};
  nodes.identities[2] = MasterIdentity{"again2", 1, false};
  Reply extended = answer(1, {integer(5000), integer(10000), text("")});
  nodes.behaviours["extend"] = {{extended}, {answer(0)}, {extended}};
  EXPECT_EQ(q.extend(k_name, contender().token, std::nullopt, 10s, 42).outcome, Quorum::Renewal::failed);
  nodes.behaviours["release"] = {{answer(1)}, {answer(0)}, {answer(0)}};
  EXPECT_EQ(q.verdict(q.release(k_name, contender().token, {})), rlock::lock::Released::unknown);
}

TEST(Quorum, AMemberThatCannotBeOneIsAnErrorAndNothingIsLeftTaken) {
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  // m2 is a Cluster node: a configuration error (78), whatever the others granted.
  nodes.behaviours["acquire"] = {{granted(1)}, {granted(2)}, {std::nullopt, 0ms, 78}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  try {
    q.acquire(k_name, contender(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 78);
  }
  EXPECT_EQ(nodes_called(nodes, "release").size(), 3u);
  EXPECT_TRUE(nodes_called(nodes, "merge").empty());
}

TEST(Quorum, AnEnclosingHoldOnAMajorityIsReenteredWithoutPhaseTwo) {
  FakeClock clock;
  ScriptedNodes nodes(3, clock);
  Reply reentered = answer(2, {integer(7), text(""), integer(2)});
  nodes.behaviours["acquire"] = {{reentered}, {granted(9)}, {reentered}};
  Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
  Quorum::Acquisition a = q.acquire(k_name, contender(), {"t1", "t2"});
  EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::reentered);
  EXPECT_EQ(a.attempt.fence, 7);
  EXPECT_EQ(a.attempt.enclosing, 1u) << "the second enclosing hold";
  EXPECT_TRUE(nodes_called(nodes, "merge").empty());
  EXPECT_TRUE(nodes_called(nodes, "release").empty());
}

TEST(Quorum, AFailedPhaseTwoSaysWhy) {
  auto has = [](const std::vector<std::string>& failures, const std::string& what) {
    for (const std::string& f : failures) {
      if (f.find(what) != std::string::npos) return true;
    }
    return false;
  };
  {
    // Granted too late: no phase 2.
    FakeClock clock;
    ScriptedNodes nodes(3, clock);
    nodes.behaviours["acquire"] = {{granted(1), 995ms}, {granted(2)}, {granted(3)}};
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    Quorum::Acquisition a = q.acquire(k_name, contender(1000ms), {});
    EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::busy);
    EXPECT_TRUE(has(a.failures, "a majority granted the lock too late")) << a.failures.size();
  }
  {
    // Phase 2 taken everywhere, but its answers came after the validity.
    FakeClock clock;
    ScriptedNodes nodes(3, clock);
    nodes.behaviours["acquire"] = {{granted(1)}, {granted(2)}, {granted(3)}};
    nodes.behaviours["merge"] = {{answer(1), 995ms}, {answer(1)}, {answer(1)}};
    Quorum q(nodes, rlock::lock::Timing{}, [&] { return clock.now; });
    Quorum::Acquisition a = q.acquire(k_name, contender(1000ms), {});
    EXPECT_EQ(a.attempt.outcome, Attempt::Outcome::busy);
    EXPECT_TRUE(has(a.failures, "only 3 of 3 masters took the fence within the validity"));
    EXPECT_EQ(nodes_called(nodes, "release").size(), 3u);
  }
}
