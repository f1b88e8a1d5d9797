// The backend of a Redlock quorum: independent masters, each asked at once, a majority decides.
#include "lock/backend.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/node_set.hpp"
#include "lock/quorum.hpp"
#include "lock/server.hpp"
#include "log.hpp"

#include <fmt/core.h>

#include <functional>
#include <set>

namespace rlock::lock {

namespace {

class QuorumBackend final : public Backend {
public:
  QuorumBackend(const Servers& servers, Timing timing, util::Millis per_node)
      : Backend(timing),
        m_nodes(servers.urls, redis::Timeouts{per_node, per_node}, servers.tls),
        m_quorum(m_nodes, timing, [] { return util::BootClock::now(); }) {}

  bool quorum() const override { return true; }
  std::string display() const override {
    std::string out;
    for (size_t i = 0; i < m_nodes.size(); ++i) {
      if (i) out += ' ';
      out += m_nodes.name(i);
    }
    return out;
  }
  redis::Client* single() override { return nullptr; }
  void set_interrupt(int fd, std::function<bool()> on_ready) override {
    m_nodes.set_interrupt(fd, std::move(on_ready));
  }
  void cap_waits(std::optional<util::BootClock::time_point> cap) override { m_nodes.cap_waits(cap); }
  // Each master counts for itself.
  bool confirm_master() override { return true; }
  bool follow_master() override { return false; }
  bool confirm_grant(const LockName&, const std::string&, std::string&) override { return true; }
  void learn_nodes() override {}

  Attempt try_acquire(const LockName& name, const Contender& c, bool,
                      const std::vector<std::string>& enclosing) override {
    Quorum::Acquisition a = m_quorum.acquire(name, c, enclosing);
    if (a.unavailable) no_majority(a.failures, m_nodes.size(), m_quorum.majority());
    if (a.attempt.outcome == Attempt::Outcome::busy) {
      a.attempt.contended = !a.majority_busy;
      for (const std::string& f : a.failures) log::verbose("{}", f);
    }
    return a.attempt;
  }
  Attempt wait_turn(const LockName&, const Contender&, const Attempt&, util::Millis, bool) override {
    throw Error(exit_code::k_internal, "a Redlock quorum has no queue to wait in");
  }
  void cancel(const LockName& name, const std::string& token, bool) override {
    m_quorum.release(name, token, {}, true);
  }
  Released release(const LockName& name, const std::string& token, const Ending& ending) override {
    Quorum::Releases r = m_quorum.release(name, token, ending);
    for (const std::string& f : r.failures) log::warning(fmt::format("could not release on {}", f));
    return m_quorum.verdict(r);
  }
  std::optional<Extension> extend(const LockName& name, const std::string& token, std::optional<util::Millis> ttl,
                                  util::Millis lease_ttl, int64_t fence, const ExtendNote& note) override {
    Quorum::Extended e = m_quorum.extend(name, token, ttl, lease_ttl, fence, note);
    switch (e.outcome) {
      case Quorum::Renewal::renewed: return e.extension;
      case Quorum::Renewal::lost: return std::nullopt;
      default: no_majority(e.failures, m_nodes.size(), m_quorum.majority());
    }
  }
  ForcedRelease force_release(const LockName& name) override {
    ForcedRelease out;
    std::vector<std::string> failures;
    for (size_t i = 0; i < m_nodes.size(); ++i) {
      try {
        ClientNode node(m_nodes.member(i));
        ForcedRelease r = lock::force_release(node, name, timing());
        if (r.was_held && !out.was_held) out = r;
        out.was_held = out.was_held || r.was_held;
      } catch (const Error& e) {
        failures.push_back(fmt::format("{}: {}", m_nodes.name(i), e.what()));
      }
    }
    if (failures.size() >= m_quorum.majority()) no_majority(failures, m_nodes.size(), m_quorum.majority());
    for (const std::string& f : failures) log::warning(f);
    return out;
  }
  LockState inspect(const LockName& name, int most) override;
  std::vector<std::string> scan_keys(const std::string& prefix, const std::string& pattern) override {
    return scan(prefix, pattern, false);
  }
  std::vector<std::string> scan_logs(const std::string& prefix, const std::string& pattern) override {
    return scan(prefix, pattern, true);
  }
  using Backend::read_log;
  std::vector<Event> read_log(const LockName& name, const LogRange& range) override;
  std::vector<std::string> scan_summaries(const std::string& prefix, const std::string& pattern) override;
  Summary read_summary(const LockName& name) override;
  void confirm_replicas(const LockName& name, int n, util::Millis timeout) override {
    for (size_t i = 0; i < m_nodes.size(); ++i) {
      ClientNode node(m_nodes.member(i));
      lock::confirm_replicas(node, name, n, timeout);
    }
  }
  void check_eviction_before(const LockName& name, bool strict) override;
  void check_eviction_after(bool strict) override {
    if (strict) return;
    for (size_t i = 0; i < m_nodes.size(); ++i) {
      if (const ServerFacts* f = m_nodes.facts(i)) check_eviction(*f, m_nodes.name(i), false);
    }
  }

private:
  // One pipeline on every master at once: the replies of each, or why it has none.
  std::vector<std::optional<std::vector<redis::Reply>>> ask_all(
      const std::function<std::vector<redis::Command>(size_t)>& commands, std::vector<std::string>& failures);
  std::vector<std::string> scan(const std::string& prefix, const std::string& pattern, bool logs);
  // The union of the keys scan_one finds on each master; fails without a majority's answers.
  std::vector<std::string> scan_all(const std::function<std::vector<std::string>(ClientNode&)>& scan_one);

  ClientNodeSet m_nodes;
  Quorum m_quorum;
};

std::vector<std::optional<std::vector<redis::Reply>>> QuorumBackend::ask_all(
    const std::function<std::vector<redis::Command>(size_t)>& commands, std::vector<std::string>& failures) {
  const size_t n = m_nodes.size();
  std::vector<std::optional<std::vector<redis::Reply>>> out(n);
  failures.resize(n);
  std::vector<redis::Connection*> connections;
  std::vector<std::vector<redis::Command>> requests;
  std::vector<size_t> asked;
  for (size_t i = 0; i < n; ++i) {
    if (!failures[i].empty()) continue;
    std::vector<redis::Command> c = commands(i);
    if (c.empty()) continue;
    try {
      connections.push_back(&m_nodes.member(i).connection());
      requests.push_back(std::move(c));
      asked.push_back(i);
    } catch (const Error& e) {
      failures[i] = e.what();
    }
  }
  std::vector<redis::Outcome> outcomes = redis::exchange_all(connections, requests);
  for (size_t k = 0; k < asked.size(); ++k) {
    size_t i = asked[k];
    if (outcomes[k].error) {
      failures[i] = outcomes[k].error->what();
      m_nodes.member(i).forget_master();
      continue;
    }
    out[i] = std::move(outcomes[k].replies);
  }
  return out;
}

LockState QuorumBackend::inspect(const LockName& name, int most) {
  // Every master read at once, in two rounds; the lock as a majority shows it, and which
  // masters disagree.
  std::vector<std::string> failures;
  auto first = ask_all([&](size_t) { return inspect_first(name, most); }, failures);
  auto second = ask_all(
      [&](size_t i) { return first[i] ? inspect_second(name, *first[i]) : std::vector<redis::Command>{}; }, failures);
  const size_t n = m_nodes.size();
  std::vector<std::optional<LockState>> states(n);
  std::vector<std::string> ids(n);
  for (size_t i = 0; i < n; ++i) {
    if (!first[i]) continue;
    try {
      states[i] = parse_inspect(name, *first[i], second[i].value_or(std::vector<redis::Reply>{}), &ids[i]);
    } catch (const Error& e) {
      if (e.exit_code() == exit_code::k_data) throw;
      failures[i] = e.what();
    }
  }
  return m_quorum.merge_views(name, states, ids, failures);
}

std::vector<Event> QuorumBackend::read_log(const LockName& name, const LogRange& range) {
  std::vector<std::string> failures;
  auto replies = ask_all([&](size_t) { return std::vector<redis::Command>{log_range(name, range)}; }, failures);
  std::vector<std::vector<Event>> copies;
  size_t answered = 0;
  for (size_t i = 0; i < m_nodes.size(); ++i) {
    if (!replies[i]) continue;
    const redis::Reply& r = replies[i]->front();
    if (r.is_error()) {
      if (r.error_code() == "WRONGTYPE") throw foreign_data(name.log_key());
      failures[i] = r.str;
      continue;
    }
    ++answered;
    copies.push_back(parse_events(r, name.key));
  }
  if (answered < m_quorum.majority()) {
    std::vector<std::string> why;
    for (size_t i = 0; i < failures.size(); ++i) {
      if (!failures[i].empty()) why.push_back(fmt::format("{}: {}", m_nodes.name(i), failures[i]));
    }
    no_majority(why, m_nodes.size(), m_quorum.majority());
  }
  std::vector<Event> merged = merge_copies(copies);
  if (merged.size() > range.count) {
    if (range.after.empty())
      merged.erase(merged.begin(), merged.end() - static_cast<std::ptrdiff_t>(range.count));
    else
      merged.resize(range.count);
  }
  return merged;
}

Summary QuorumBackend::read_summary(const LockName& name) {
  std::vector<std::string> failures;
  auto replies = ask_all([&](size_t) { return summary_read(name); }, failures);
  std::vector<Summary> copies;
  for (size_t i = 0; i < m_nodes.size(); ++i) {
    if (!replies[i]) continue;
    try {
      copies.push_back(parse_summary(name, *replies[i]));
    } catch (const Error& e) {
      if (e.exit_code() == exit_code::k_data) throw;
      failures[i] = e.what();
    }
  }
  if (copies.size() < m_quorum.majority()) {
    std::vector<std::string> why;
    for (size_t i = 0; i < failures.size(); ++i) {
      if (!failures[i].empty()) why.push_back(fmt::format("{}: {}", m_nodes.name(i), failures[i]));
    }
    no_majority(why, m_nodes.size(), m_quorum.majority());
  }
  return merge_summaries(copies);
}

std::vector<std::string> QuorumBackend::scan_summaries(const std::string& prefix, const std::string& pattern) {
  return scan_all([&](ClientNode& node) { return lock::scan_summaries(node, prefix, pattern); });
}

std::vector<std::string> QuorumBackend::scan(const std::string& prefix, const std::string& pattern, bool logs) {
  return scan_all([&](ClientNode& node) { return lock::scan_keys(node, prefix, pattern, logs); });
}

std::vector<std::string> QuorumBackend::scan_all(const std::function<std::vector<std::string>(ClientNode&)>& scan_one) {
  std::set<std::string> keys;
  size_t failed = 0;
  for (size_t i = 0; i < m_nodes.size(); ++i) {
    try {
      ClientNode node(m_nodes.member(i));
      for (const std::string& k : scan_one(node)) keys.insert(k);
    } catch (const Error& e) {
      if (e.exit_code() != exit_code::k_unavailable) throw;
      log::warning(e.what());
      ++failed;
    }
  }
  if (m_nodes.size() - failed < m_quorum.majority()) {
    throw Error(exit_code::k_unavailable, "no majority of the Redis masters answered the scan");
  }
  return {keys.begin(), keys.end()};
}

void QuorumBackend::check_eviction_before(const LockName&, bool strict) {
  // Called by run and acquire before anything is sent: the greeting of their connections reads
  // all that an acquisition needs (a call that does not acquire reads the server section alone).
  m_nodes.prepare_acquisition();
  // A quorum's members also tell whether they are Cluster nodes (refused: node_set.cpp).
  for (size_t i = 0; i < m_nodes.size(); ++i) {
    redis::Client& c = m_nodes.member(i);
    // Every member's greeting is INFO already (lock/node_set.cpp).
    if (strict) {
      redis::Reply info = c.call(info_member());
      if (info.type != redis::Reply::Type::string) continue;
      ServerFacts facts = parse_info(info.str);
      if (facts.cluster) throw cluster_member_error(c.url().display());
      check_eviction(facts, c.url().display(), true);
    }
  }
}

}  // namespace

std::unique_ptr<Backend> quorum_backend(const Servers& servers, Timing timing, util::Millis per_node) {
  return std::make_unique<QuorumBackend>(servers, timing, per_node);
}

}  // namespace rlock::lock
