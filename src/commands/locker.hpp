#pragma once

#include "commands/options.hpp"
#include "lock/inspect.hpp"
#include "lock/lease.hpp"
#include "lock/node.hpp"
#include "lock/node_set.hpp"
#include "lock/quorum.hpp"
#include "redis/client.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rlock::commands {

// Where the commands take locks: one Redis (a server, a Sentinel master, a Cluster) or, with
// several URLs, a Redlock quorum of independent masters. The same operations either way.
class Locker {
public:
  // ttl: the lease length, from which a quorum's per-node timeout defaults (nullopt for commands
  // that take no lock: the I/O timeout then).
  Locker(const ConnectOptions& connect, std::optional<util::Millis> ttl);
  ~Locker();

  bool quorum() const { return m_quorum != nullptr; }
  // The URL, or the masters' URLs, for messages.
  std::string display() const;
  // The one Redis; nullptr for a quorum.
  redis::Client* single() { return m_client.get(); }

  void set_interrupt(int fd, std::function<bool()> on_ready);
  void cap_waits(std::optional<redis::Clock::time_point> cap);
  // One Redis: see redis::Client; a quorum: each master counts for itself (true, nothing).
  bool confirm_master();
  void learn_nodes();

  // A quorum neither queues nor re-enters a queue: with `queue` it reports busy, and take_lock
  // tries again after a random delay. Fewer than a majority answering throws Error 69 naming the
  // masters that failed (never busy).
  lock::Attempt try_acquire(const lock::LockName& name, const lock::Contender& c, bool queue,
                            const std::vector<std::string>& enclosing);
  lock::Attempt wait_turn(const lock::LockName& name, const lock::Contender& c, const std::vector<std::string>& watch,
                          util::Millis heartbeat);
  void cancel(const lock::LockName& name, const std::string& token);
  bool release(const lock::LockName& name, const std::string& token);
  // Extends; nullopt when the lock is lost. A quorum throws Error 69 when no majority answered
  // within the validity of lease_ttl, and sets a master that lost the key again with fence.
  std::optional<lock::Extension> extend(const lock::LockName& name, const std::string& token,
                                        std::optional<util::Millis> ttl, util::Millis lease_ttl, int64_t fence,
                                        const std::optional<lock::KeeperInfo>& keeper = {});
  lock::ForcedRelease force_release(const lock::LockName& name);
  lock::LockState inspect(const lock::LockName& name, int max_waiters = 100);
  std::vector<std::string> scan_keys(const std::string& prefix, const std::string& pattern);
  void confirm_replicas(const lock::LockName& name, int n, util::Millis timeout);

  // The eviction check (see commands/common.hpp) on every server.
  void check_eviction_before(bool strict);
  void check_eviction_after(bool strict);

private:
  std::unique_ptr<redis::Client> m_client;
  std::unique_ptr<lock::ClientNode> m_node;
  std::unique_ptr<lock::ClientNodeSet> m_nodes;
  std::unique_ptr<lock::Quorum> m_quorum;
};

// A quorum's per-node timeout: --node-timeout, else 2% of the TTL, at least 50ms, at most the
// I/O timeout (the I/O timeout when no TTL is known).
util::Millis node_timeout(const ConnectOptions& connect, std::optional<util::Millis> ttl);

}  // namespace rlock::commands
