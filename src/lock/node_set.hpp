#pragma once

#include "lock/quorum.hpp"
#include "lock/server.hpp"
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
  std::vector<NodeAnswer> eval_until(const redis::Script& script, const std::vector<std::string>& keys,
                                     const std::vector<std::vector<std::string>>& args, const std::vector<bool>& which,
                                     const Decided& decided) override;
  // The script goes out by FCALL where every member asked runs scripts as functions (the library
  // is loaded where phase 1 ran); else eval_all, which falls back on a missing script.
  void send_all(const redis::Script& script, const std::vector<std::string>& keys,
                const std::vector<std::vector<std::string>>& args, const std::vector<bool>& which) override;
  // Reads the answers of send_all's requests, if any are under way (each within its timeouts).
  void settle();
  // Waits for send_all's requests only as long as one is still being sent.
  ~ClientNodeSet() override;

  // Member i, with nothing of send_all under way on it.
  redis::Client& member(size_t i) {
    settle();
    return *m_members[i];
  }
  // Every connection opened from now on is greeted with what an acquisition reads of a master
  // (info_member: persistence and the eviction policy too), not just its identity (info_identity).
  void prepare_acquisition() override;
  // What member i's greeting (INFO) says, parsed once per connection; nullptr when it said nothing
  // (not connected yet, or INFO refused by an ACL). Valid until the next request.
  const ServerFacts* facts(size_t i) const;
  // See redis::Client; applies to every member.
  void set_interrupt(int fd, std::function<bool()> on_ready);
  void cap_waits(std::optional<redis::Clock::time_point> cap);

private:
  std::vector<NodeAnswer> eval(const redis::Script& script, const std::vector<std::string>& keys,
                               const std::vector<std::vector<std::string>>& args, const std::vector<bool>& which,
                               const Decided* decided);
  // Member i's answer, from the last reply of a script that ran (a Cluster node and a replica
  // refused); `moved`: the member's master may have moved (a replica answered).
  NodeAnswer answer_of(size_t i, redis::Reply reply, bool* moved = nullptr) const;

  std::vector<std::unique_ptr<redis::Client>> m_members;
  // Each member's last greeting and its facts: a greeting is read several times a request (the
  // Cluster check of each answer, the identity, the eviction check) and parsed only when it changed.
  struct Parsed {
    std::string greeting;
    ServerFacts facts;
  };
  mutable std::vector<std::optional<Parsed>> m_parsed;
  std::vector<redis::Connection*> m_unsettled;  // send_all's requests, answers not read yet
  int m_interrupt_fd = -1;
  std::function<bool()> m_on_interrupt;
};

}  // namespace rlock::lock
