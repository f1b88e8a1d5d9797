#include "backend.hpp"

#include <algorithm>

namespace rlock::lock {

util::Millis node_timeout(const Servers& servers, std::optional<util::Millis> ttl) {
  if (servers.node_timeout) return *servers.node_timeout;
  if (!ttl) return servers.timeouts.command;
  return std::min(servers.timeouts.command, std::max(util::Millis(50), *ttl / 50));
}

std::unique_ptr<Backend> open_backend(const Servers& servers, std::optional<util::Millis> ttl) {
  Timing timing = Timing::standard(servers.log_length);
  if (servers.urls.size() == 1) return single_backend(servers, timing);
  return quorum_backend(servers, timing, node_timeout(servers, ttl));
}

}  // namespace rlock::lock
