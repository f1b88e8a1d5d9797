// The Client in a Redis Cluster: the nodes it learns from CLUSTER SLOTS, another node to ask
// when the one it used fails (MOVED and ASK are followed in client.cpp, routed()), and the check
// that the node it uses owns a slot as the Cluster's majority sees it.
#include "client.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

namespace rlock::redis {

void Client::learn_nodes() {
  if (m_url.kind != Url::Kind::direct || m_nodes_asked) return;
  m_nodes_asked = true;
  Reply slots;
  Connection& asked = current();
  try {
    slots = asked.call({"CLUSTER", "SLOTS"});
  } catch (const Error& e) {
    if (e.exit_code() == exit_code::k_permission) return;  // an ACL without +cluster: keep what we have
    throw;
  }
  if (slots.type != Reply::Type::array) return;  // not a Cluster
  // Each node: address, port, id (Redis 4 and later), first the ones that have an id.
  for (const Reply& range : slots.elements) {
    for (size_t i = 2; i < range.elements.size(); ++i) {
      const Reply& n = range.elements[i];
      if (n.elements.size() > 2 && !n.elements[0].str.empty() && !n.elements[2].str.empty()) {
        m_node_ids[fmt::format("{}:{}", n.elements[0].str, n.elements[1].integer)] = n.elements[2].str;
      }
    }
  }
  m_cluster_masters.clear();
  m_slot_ranges.clear();
  m_slots_from = asked.endpoint().identity();
  for (const Reply& range : slots.elements) {
    for (size_t i = 2; i < range.elements.size(); ++i) {
      const Reply& n = range.elements[i];
      if (n.elements.size() < 2 || n.elements[0].str.empty()) continue;
      std::pair<std::string, int> address{n.elements[0].str, static_cast<int>(n.elements[1].integer)};
      if (std::find(m_cluster_nodes.begin(), m_cluster_nodes.end(), address) == m_cluster_nodes.end()) {
        m_cluster_nodes.push_back(address);
      }
      if (i != 2) continue;  // a replica
      if (std::find(m_cluster_masters.begin(), m_cluster_masters.end(), address) == m_cluster_masters.end()) {
        m_cluster_masters.push_back(address);
      }
      m_slot_ranges.push_back({static_cast<int>(range.elements[0].integer), static_cast<int>(range.elements[1].integer),
                               node_identity(address.first, address.second)});
    }
  }
}

std::string Client::node_identity(const std::string& host, int port) const {
  std::string address = fmt::format("{}:{}", host, port);
  auto it = m_node_ids.find(address);
  return it == m_node_ids.end() ? address : it->second;
}

bool Client::confirm_slot_owner(const std::string& key, int slot, std::string& why) {
  m_named_owner.reset();
  if (m_url.kind != Url::Kind::direct || !m_current) return true;
  Connection& granted = *m_current;
  learn_nodes();
  if (m_cluster_masters.empty()) {
    log::verbose(
        "{}: the Cluster's masters are not known (not a Cluster, or CLUSTER SLOTS refused): the owner of "
        "the lock's slot is not checked",
        granted.endpoint().display());
    return true;
  }
  // How the node that granted is known: by its address, or (the URL's node, named otherwise than
  // the Cluster names it) as the owner of the slot in the map it gave itself.
  std::string me = node_identity(granted.endpoint().host, granted.endpoint().port);
  if (!m_node_ids.count(fmt::format("{}:{}", granted.endpoint().host, granted.endpoint().port)) &&
      m_slots_from == granted.endpoint().identity()) {
    for (const SlotRange& r : m_slot_ranges) {
      if (slot >= r.first && slot <= r.last) me = r.owner;
    }
  }
  // The voters: the masters learned, and the node itself, whose grant (or hold) is its vote.
  std::vector<Connection*> ask;
  for (const auto& [host, port] : m_cluster_masters) {
    if (node_identity(host, port) == me) continue;
    Connection& c = node(host, port);
    if (&c != &granted) ask.push_back(&c);
  }
  const size_t voters = ask.size() + 1;
  const size_t majority = voters / 2 + 1;
  // The owner of the slot that voter i names (its identity), and its address.
  auto named = [&](size_t i, const Outcome& o) -> std::optional<std::pair<std::string, std::pair<std::string, int>>> {
    if (o.error || o.replies.empty()) return std::nullopt;
    const Reply& r = o.replies.front();
    const Endpoint& voter = ask[i]->endpoint();
    // It serves the slot itself: the answer, or ASK (the slot is migrating away from it).
    if (r.type == Reply::Type::integer || r.error_code() == "ASK") {
      return std::pair{node_identity(voter.host, voter.port), std::pair{voter.host, voter.port}};
    }
    if (r.error_code() != "MOVED") return std::nullopt;  // CLUSTERDOWN, TRYAGAIN...: no vote
    std::vector<std::string> words = util::split(r.str, " ");
    size_t colon = words.size() == 3 ? words[2].rfind(':') : std::string::npos;
    long long port = 0;
    if (colon == std::string::npos || !util::parse_int(words[2].substr(colon + 1), 1, 65535, port)) {
      return std::nullopt;
    }
    std::string host = words[2].substr(0, colon);
    return std::pair{node_identity(host, static_cast<int>(port)), std::pair{host, static_cast<int>(port)}};
  };
  auto tally = [&](const std::vector<std::optional<Outcome>>& so_far) {
    std::map<std::string, size_t> votes{{me, 1}};
    for (size_t i = 0; i < so_far.size(); ++i) {
      if (!so_far[i]) continue;
      if (auto owner = named(i, *so_far[i])) ++votes[owner->first];
    }
    return votes;
  };
  // Done as soon as a majority names this node: a stopped master costs nothing then.
  auto enough = [&](const std::vector<std::optional<Outcome>>& so_far) { return tally(so_far)[me] >= majority; };
  std::vector<std::vector<Command>> commands(ask.size(), {{"EXISTS", key}});
  std::vector<Outcome> answers = exchange_all(ask, commands, m_interrupt_fd, m_on_interrupt, enough);
  std::map<std::string, size_t> votes = tally(std::vector<std::optional<Outcome>>(answers.begin(), answers.end()));
  if (votes[me] >= majority) return true;
  // Not confirmed: the owner a majority names, if one does, is where the next command goes.
  for (size_t i = 0; i < answers.size(); ++i) {
    auto owner = named(i, answers[i]);
    if (owner && owner->first != me && votes[owner->first] >= majority) {
      m_named_owner = owner->second;
      why = fmt::format("{} of the {} Cluster masters name {}:{} as the owner of the lock's slot, not {}",
                        votes[owner->first], voters, owner->second.first, owner->second.second,
                        granted.endpoint().display());
      return false;
    }
  }
  // No majority for any node (masters replaced since they were learned, or cut off): learned
  // again for the next check.
  m_nodes_asked = false;
  why = fmt::format("only {} of the {} Cluster masters name {} as the owner of the lock's slot (a majority, {}, must)",
                    votes[me], voters, granted.endpoint().display(), majority);
  return false;
}

bool Client::try_other_node(const std::string& why) {
  if (m_cluster_nodes.empty() || !m_current) return false;
  const Endpoint failed = m_current->endpoint();
  for (const auto& [host, port] : m_cluster_nodes) {
    if (host == failed.host && port == failed.port) continue;
    Connection& other = node(host, port);
    if (!other.connected() && other.endpoint().identity() == failed.identity()) continue;
    log::verbose("{}; asking Cluster node {} where the slot is now", why, other.endpoint().display());
    m_current = &other;
    return true;
  }
  return false;
}

}  // namespace rlock::redis
