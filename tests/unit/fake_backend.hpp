#pragma once

#include "lock/backend.hpp"

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

// A lock::Backend for the unit tests: each call takes the next of its scripted answers (an
// attempt, or an exception thrown) and is recorded, with what it was given.
class FakeBackend final : public rlock::lock::Backend {
public:
  using Attempt = rlock::lock::Attempt;
  using Answer = std::function<Attempt()>;

  explicit FakeBackend(rlock::lock::Timing timing, bool quorum = false) : Backend(timing), m_quorum(quorum) {}

  // Scripted answers, taken in order; an empty queue answers busy.
  std::deque<Answer> acquire_answers;
  std::deque<Answer> wait_answers;
  std::deque<std::function<std::optional<rlock::lock::Extension>()>> extend_answers;
  bool master_confirmed = true;
  std::deque<bool> grants_confirmed;  // confirm_grant's answers, in order; none left: confirmed
  std::deque<bool> masters_moved;     // follow_master's answers, in order; none left: not moved
  std::function<void()> on_confirm_replicas;

  // What was asked.
  struct WaitCall {
    std::vector<std::string> watch;
    rlock::util::Millis heartbeat;
    bool fresh = false;
    std::string arrival;  // the arrival it would join again at, when it carries one
  };
  std::vector<bool> acquire_calls;  // the `queue` flag of each
  std::vector<WaitCall> wait_calls;
  std::vector<bool> cancel_calls;  // timed_out of each
  int confirm_grant_calls = 0;
  int follow_calls = 0;
  int release_calls = 0;
  int learn_calls = 0;
  std::vector<std::optional<rlock::util::BootClock::time_point>> caps;
  struct ExtendCall {
    std::string token;
    std::optional<rlock::util::Millis> ttl;
    int64_t fence = 0;
    std::optional<rlock::lock::KeeperInfo> keeper;
    bool tick_ran = false;
  };
  std::vector<ExtendCall> extend_calls;

  bool quorum() const override { return m_quorum; }
  std::string display() const override { return "fake"; }
  rlock::redis::Client* single() override { return nullptr; }
  void set_interrupt(int, std::function<bool()>) override {}
  void cap_waits(std::optional<rlock::util::BootClock::time_point> cap) override { caps.push_back(cap); }
  bool confirm_master() override { return master_confirmed; }
  bool follow_master() override {
    ++follow_calls;
    if (masters_moved.empty()) return false;
    bool moved = masters_moved.front();
    masters_moved.pop_front();
    return moved;
  }
  bool confirm_grant(const rlock::lock::LockName&, const std::string&, std::string& why) override {
    ++confirm_grant_calls;
    if (grants_confirmed.empty()) return true;
    bool confirmed = grants_confirmed.front();
    grants_confirmed.pop_front();
    if (!confirmed) why = "the sentinels name another master";
    return confirmed;
  }
  void learn_nodes() override { ++learn_calls; }

  Attempt try_acquire(const rlock::lock::LockName&, const rlock::lock::Contender&, bool queue,
                      const std::vector<std::string>&) override {
    acquire_calls.push_back(queue);
    return next(acquire_answers);
  }
  Attempt wait_turn(const rlock::lock::LockName&, const rlock::lock::Contender&, const Attempt& last,
                    rlock::util::Millis heartbeat, bool fresh) override {
    wait_calls.push_back({last.watch, heartbeat, fresh, last.rejoin_waited ? last.arrival : std::string()});
    return next(wait_answers);
  }
  void cancel(const rlock::lock::LockName&, const std::string&, bool timed_out) override {
    cancel_calls.push_back(timed_out);
  }
  rlock::lock::Released release(const rlock::lock::LockName&, const std::string&, const rlock::lock::Ending&) override {
    ++release_calls;
    return rlock::lock::Released::released;
  }
  std::optional<rlock::lock::Extension> extend(const rlock::lock::LockName&, const std::string& token,
                                               std::optional<rlock::util::Millis> ttl, rlock::util::Millis,
                                               int64_t fence, const rlock::lock::ExtendNote& note) override {
    extend_calls.push_back({token, ttl, fence, note.keeper, note.tick_ran});
    if (extend_answers.empty()) return std::nullopt;
    auto answer = extend_answers.front();
    extend_answers.pop_front();
    return answer();
  }
  rlock::lock::ForcedRelease force_release(const rlock::lock::LockName&) override { return {}; }
  rlock::lock::LockState inspect(const rlock::lock::LockName&, int) override { return {}; }
  std::vector<std::string> scan_keys(const std::string&, const std::string&) override { return {}; }
  std::vector<std::string> scan_logs(const std::string&, const std::string&) override { return {}; }
  using Backend::read_log;
  std::vector<rlock::lock::Event> read_log(const rlock::lock::LockName&, const rlock::lock::LogRange&) override {
    return {};
  }
  std::vector<std::string> scan_summaries(const std::string&, const std::string&) override { return {}; }
  rlock::lock::Summary read_summary(const rlock::lock::LockName&) override { return {}; }
  void confirm_replicas(const rlock::lock::LockName&, int, rlock::util::Millis) override {
    if (on_confirm_replicas) on_confirm_replicas();
  }
  void check_eviction_before(const rlock::lock::LockName&, bool) override {}
  void check_eviction_after(bool) override {}

private:
  static Attempt next(std::deque<Answer>& answers) {
    if (answers.empty()) return Attempt{};
    Answer a = answers.front();
    answers.pop_front();
    return a();
  }

  bool m_quorum;
};
