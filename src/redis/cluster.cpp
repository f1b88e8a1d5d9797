// The Client in a Redis Cluster: the nodes it learns from CLUSTER SLOTS, and another node to ask
// when the one it used fails (MOVED and ASK are followed in client.cpp, routed()).
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
  try {
    slots = current().call({"CLUSTER", "SLOTS"});
  } catch (const Error& e) {
    if (e.exit_code() == exit_code::k_permission) return;  // an ACL without +cluster: keep what we have
    throw;
  }
  if (slots.type != Reply::Type::array) return;  // not a Cluster
  for (const Reply& range : slots.elements) {
    for (size_t i = 2; i < range.elements.size(); ++i) {
      const Reply& n = range.elements[i];
      if (n.elements.size() < 2 || n.elements[0].str.empty()) continue;
      std::pair<std::string, int> address{n.elements[0].str, static_cast<int>(n.elements[1].integer)};
      if (std::find(m_cluster_nodes.begin(), m_cluster_nodes.end(), address) == m_cluster_nodes.end()) {
        m_cluster_nodes.push_back(address);
      }
    }
  }
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
