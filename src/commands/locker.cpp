#include "locker.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/server.hpp"
#include "log.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

namespace rlock::commands {

namespace {

// A quorum's failure to hear from a majority: exit 69, naming the masters that failed.
[[noreturn]] void no_majority(const std::vector<std::string>& failures, size_t masters, size_t majority) {
  std::string list;
  for (const std::string& f : failures) {
    if (!list.empty()) list += "; ";
    list += f;
  }
  throw Error(exit_code::k_unavailable, fmt::format("no majority of the {} Redis masters answered ({} needed): {}",
                                                    masters, majority, list));
}

}  // namespace

util::Millis node_timeout(const ConnectOptions& connect, std::optional<util::Millis> ttl) {
  if (connect.node_timeout) return *connect.node_timeout;
  if (!ttl) return connect.timeouts.command;
  return std::min(connect.timeouts.command, std::max(util::Millis(50), *ttl / 50));
}

Locker::Locker(const ConnectOptions& connect, std::optional<util::Millis> ttl) {
  if (connect.urls.size() == 1) {
    m_client = std::make_unique<redis::Client>(connect.urls.front(), connect.timeouts, connect.tls);
    m_node = std::make_unique<lock::ClientNode>(*m_client);
    return;
  }
  util::Millis per_node = node_timeout(connect, ttl);
  m_nodes = std::make_unique<lock::ClientNodeSet>(connect.urls, redis::Timeouts{per_node, per_node}, connect.tls);
  m_quorum = std::make_unique<lock::Quorum>(*m_nodes, [] { return util::BootClock::now(); });
}

Locker::~Locker() = default;

std::string Locker::display() const {
  if (m_client) return m_client->url().display();
  std::string out;
  for (size_t i = 0; i < m_nodes->size(); ++i) {
    if (i) out += ' ';
    out += m_nodes->name(i);
  }
  return out;
}

void Locker::set_interrupt(int fd, std::function<bool()> on_ready) {
  if (m_client) m_client->set_interrupt(fd, std::move(on_ready));
  else m_nodes->set_interrupt(fd, std::move(on_ready));
}

void Locker::cap_waits(std::optional<redis::Clock::time_point> cap) {
  if (m_client) m_client->cap_waits(cap);
  else m_nodes->cap_waits(cap);
}

bool Locker::confirm_master() { return m_client ? m_client->confirm_master() : true; }

void Locker::learn_nodes() {
  if (m_client) m_client->learn_nodes();
}

lock::Attempt Locker::try_acquire(const lock::LockName& name, const lock::Contender& c, bool queue,
                                  const std::vector<std::string>& enclosing) {
  if (m_client) return lock::try_acquire(*m_node, name, c, queue, enclosing);
  lock::Quorum::Acquisition a = m_quorum->acquire(name, c, enclosing);
  if (a.unavailable) no_majority(a.failures, m_nodes->size(), m_quorum->majority());
  if (a.attempt.outcome == lock::Attempt::Outcome::busy) {
    a.attempt.contended = !a.majority_busy;
    for (const std::string& f : a.failures) log::verbose("{}", f);
  }
  return a.attempt;
}

lock::Attempt Locker::wait_turn(const lock::LockName& name, const lock::Contender& c,
                                const std::vector<std::string>& watch, util::Millis heartbeat) {
  if (!m_client) throw Error(exit_code::k_internal, "a Redlock quorum has no queue to wait in");
  return lock::wait_turn(*m_node, name, c, watch, heartbeat);
}

void Locker::cancel(const lock::LockName& name, const std::string& token) {
  if (m_client) lock::cancel(*m_node, name, token);
  else m_quorum->release(name, token);
}

bool Locker::release(const lock::LockName& name, const std::string& token) {
  if (m_client) return lock::release(*m_node, name, token);
  lock::Quorum::Released r = m_quorum->release(name, token);
  // Not held is an answer a majority gives; masters that did not answer say nothing.
  if (r.answered < m_quorum->majority()) no_majority(r.failures, m_nodes->size(), m_quorum->majority());
  for (const std::string& f : r.failures) log::warning(fmt::format("could not release on {}", f));
  return r.held >= m_quorum->majority();
}

std::optional<lock::Extension> Locker::extend(const lock::LockName& name, const std::string& token,
                                              std::optional<util::Millis> ttl, util::Millis lease_ttl, int64_t fence,
                                              const std::optional<lock::KeeperInfo>& keeper) {
  if (m_client) return lock::extend(*m_node, name, token, ttl, keeper);
  lock::Quorum::Extended e = m_quorum->extend(name, token, ttl, lease_ttl, fence, keeper);
  switch (e.outcome) {
    case lock::Quorum::Renewal::renewed: return e.extension;
    case lock::Quorum::Renewal::lost: return std::nullopt;
    default: no_majority(e.failures, m_nodes->size(), m_quorum->majority());
  }
}

lock::ForcedRelease Locker::force_release(const lock::LockName& name) {
  if (m_client) return lock::force_release(*m_node, name);
  lock::ForcedRelease out;
  std::vector<std::string> failures;
  for (size_t i = 0; i < m_nodes->size(); ++i) {
    try {
      lock::ClientNode node(m_nodes->member(i));
      lock::ForcedRelease r = lock::force_release(node, name);
      if (r.was_held && !out.was_held) out = r;
      out.was_held = out.was_held || r.was_held;
    } catch (const Error& e) {
      failures.push_back(fmt::format("{}: {}", m_nodes->name(i), e.what()));
    }
  }
  if (failures.size() >= m_quorum->majority()) no_majority(failures, m_nodes->size(), m_quorum->majority());
  for (const std::string& f : failures) log::warning(f);
  return out;
}

lock::LockState Locker::inspect(const lock::LockName& name, int max_waiters) {
  if (m_client) return lock::inspect(*m_node, name, max_waiters);
  // Every master read at once; the lock as a majority shows it, and which masters disagree.
  const size_t n = m_nodes->size();
  std::vector<redis::Connection*> connections;
  std::vector<size_t> asked;
  std::vector<lock::MasterView> views(n);
  for (size_t i = 0; i < n; ++i) {
    views[i].url = m_nodes->name(i);
    try {
      connections.push_back(&m_nodes->member(i).connection());
      asked.push_back(i);
    } catch (const Error& e) {
      views[i].error = e.what();
    }
  }
  std::vector<redis::Outcome> outcomes =
      redis::exchange_all(connections, std::vector(connections.size(), lock::inspect_commands(name)));
  std::vector<std::optional<lock::LockState>> states(n);
  std::vector<std::string> ids(n);
  for (size_t k = 0; k < asked.size(); ++k) {
    size_t i = asked[k];
    if (outcomes[k].error) {
      views[i].error = outcomes[k].error->what();
      continue;
    }
    try {
      states[i] = lock::parse_inspect(name, outcomes[k].replies, max_waiters, &ids[i]);
    } catch (const Error& e) {
      if (e.exit_code() == exit_code::k_data) throw;
      views[i].error = e.what();
    }
  }
  std::map<std::string, size_t> votes;  // holder id ("" for free) -> masters
  size_t answered = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!states[i]) continue;
    ++answered;
    ++votes[states[i]->held ? ids[i] : std::string()];
  }
  if (answered < m_quorum->majority()) {
    std::vector<std::string> failures;
    for (const lock::MasterView& v : views) {
      if (!v.error.empty()) failures.push_back(v.error);
    }
    no_majority(failures, n, m_quorum->majority());
  }
  std::string best;
  size_t best_votes = 0;
  for (const auto& [id, count] : votes) {
    if (count > best_votes) best = id, best_votes = count;
  }
  lock::LockState out;
  out.key = name.key;
  bool majority_view = best_votes >= m_quorum->majority();
  // The holder as the agreeing masters show it. A master that restarted and got the lock back at
  // a renewal knows only the token and the fence, not who holds it or since when: the first
  // agreeing master with the holder's details is taken.
  auto complete = [&](size_t i) { return !states[i]->holders.empty() && !states[i]->holders.front().holder.host.empty(); };
  std::optional<size_t> chosen;
  for (size_t i = 0; i < n; ++i) {
    if (!states[i]) continue;
    views[i].held = states[i]->held;
    if (!states[i]->holders.empty()) views[i].holder = states[i]->holders.front().holder;
    views[i].agrees = majority_view && (states[i]->held ? ids[i] : std::string()) == best;
    if (views[i].agrees && (!chosen || (!complete(*chosen) && complete(i)))) chosen = i;
  }
  if (chosen) out = *states[*chosen];
  for (size_t i = 0; i < n; ++i) {
    if (!states[i]) continue;
    out.fence = std::max(out.fence.value_or(0), states[i]->fence.value_or(0));
    if (views[i].agrees && views[i].holder.host.empty() && !out.holders.empty()) {
      views[i].holder = out.holders.front().holder;
    }
  }
  if (!majority_view) {
    // Nobody holds it on a majority: it is free, whatever minorities show.
    out.held = false;
    out.holders.clear();
  }
  out.key = name.key;
  out.masters = views;
  out.agreeing = 0;
  for (const lock::MasterView& v : views) out.agreeing += v.agrees;
  return out;
}

std::vector<std::string> Locker::scan_keys(const std::string& prefix, const std::string& pattern) {
  if (m_client) return lock::scan_keys(*m_node, prefix, pattern);
  std::set<std::string> keys;
  size_t failed = 0;
  for (size_t i = 0; i < m_nodes->size(); ++i) {
    try {
      lock::ClientNode node(m_nodes->member(i));
      for (const std::string& k : lock::scan_keys(node, prefix, pattern)) keys.insert(k);
    } catch (const Error& e) {
      if (e.exit_code() != exit_code::k_unavailable) throw;
      log::warning(e.what());
      ++failed;
    }
  }
  if (m_nodes->size() - failed < m_quorum->majority()) {
    throw Error(exit_code::k_unavailable, "no majority of the Redis masters answered the scan");
  }
  return {keys.begin(), keys.end()};
}

void Locker::confirm_replicas(const lock::LockName& name, int n, util::Millis timeout) {
  if (m_client) {
    lock::confirm_replicas(*m_node, name, n, timeout);
    return;
  }
  for (size_t i = 0; i < m_nodes->size(); ++i) {
    lock::ClientNode node(m_nodes->member(i));
    lock::confirm_replicas(node, name, n, timeout);
  }
}

void Locker::check_eviction_before(bool strict) {
  if (m_client) {
    if (strict) {
      lock::check_eviction(m_client->call(lock::info_memory()), m_client->url().display(), true);
    } else {
      m_client->set_greeting(lock::info_memory());
    }
    return;
  }
  // A quorum's members also tell whether they are Cluster nodes (refused: node_set.cpp).
  for (size_t i = 0; i < m_nodes->size(); ++i) {
    redis::Client& c = m_nodes->member(i);
    if (strict) {
      redis::Reply info = c.call(lock::info_member());
      if (lock::is_cluster_node(info)) throw lock::cluster_member_error(c.url().display());
      lock::check_eviction(info, c.url().display(), true);
    } else {
      c.set_greeting(lock::info_member());
    }
  }
}

void Locker::check_eviction_after(bool strict) {
  if (strict) return;
  if (m_client) {
    lock::check_eviction(m_client->greeting_reply(), m_client->url().display(), false);
    return;
  }
  for (size_t i = 0; i < m_nodes->size(); ++i) {
    redis::Client& c = m_nodes->member(i);
    lock::check_eviction(c.greeting_reply(), c.url().display(), false);
  }
}

}  // namespace rlock::commands
