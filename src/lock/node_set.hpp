#pragma once

#include "lock/quorum.hpp"
#include "redis/client.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace rlock::lock {

// Independent masters for Redlock, one redis::Client each (a server, TLS, a unix socket or a
// Sentinel-managed master; a Cluster is refused). A request goes to every master at once and the
// answers are gathered from one poll, each master bounded by its per-node timeout.
class ClientNodeSet final : public NodeSet {
public:
  ClientNodeSet(const std::vector<redis::Url>& urls, redis::Timeouts per_node, const redis::TlsOptions& tls);

  size_t size() const override { return m_members.size(); }
  std::string name(size_t i) const override { return m_members[i]->url().display(); }
  std::optional<MasterIdentity> identity(size_t i) const override;
  std::vector<NodeAnswer> eval_all(const redis::Script& script, const std::vector<std::string>& keys,
                                   const std::vector<std::vector<std::string>>& args,
                                   const std::vector<bool>& which) override;

  redis::Client& member(size_t i) { return *m_members[i]; }
  // See redis::Client; applies to every member.
  void set_interrupt(int fd, std::function<bool()> on_ready);
  void cap_waits(std::optional<redis::Clock::time_point> cap);

private:
  std::vector<std::unique_ptr<redis::Client>> m_members;
  int m_interrupt_fd = -1;
  std::function<bool()> m_on_interrupt;
};

}  // namespace rlock::lock
