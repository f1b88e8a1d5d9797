#pragma once

#include "lock/history.hpp"
#include "lock/inspect.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "lock/released.hpp"
#include "lock/summary.hpp"
#include "lock/timing.hpp"
#include "redis/client.hpp"
#include "redis/connection.hpp"
#include "redis/tls.hpp"
#include "redis/url.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// Where the locks live, as the command line, the environment and the config file say.
struct Servers {
  std::vector<redis::Url> urls;              // one, or several independent masters (Redlock)
  std::optional<util::Millis> node_timeout;  // Redlock: each master's timeout (--node-timeout)
  redis::Timeouts timeouts;
  redis::TlsOptions tls;
  std::string prefix = "rlock:";
  int log_length = 1'000;  // --log-length: events of history kept per lock (0: none)
};

// Where the commands take locks: one Redis (a server, a Sentinel master, a Cluster) or, with
// several URLs, a Redlock quorum of independent masters. The same operations either way; a
// quorum has no queue (it retries instead), and refuses shared holds and semaphores.
class Backend {
public:
  virtual ~Backend() = default;

  // Whether this is a Redlock quorum.
  virtual bool quorum() const = 0;
  // The URL, or the masters' URLs, for messages.
  virtual std::string display() const = 0;
  // The one Redis; nullptr for a quorum.
  virtual redis::Client* single() = 0;
  const Timing& timing() const { return m_timing; }

  // While a call waits, fd is watched too: on_ready returning true abandons the call (a signal).
  virtual void set_interrupt(int fd, std::function<bool()> on_ready) = 0;
  // No wait goes past cap (nullopt lifts it).
  virtual void cap_waits(std::optional<util::BootClock::time_point> cap) = 0;
  // Sentinel: whether a majority of the sentinels still names the master (see redis::Client);
  // always true elsewhere.
  virtual bool confirm_master() = 0;
  // Sentinel, for a waiter: asks the sentinels as confirm_master does, and moves to the master a
  // majority names; true when that is another master than the one commands went to (the
  // waiter's place is there, or must be made there). False elsewhere, with no I/O.
  virtual bool follow_master() = 0;
  // Sentinel: after a grant, whether the server that granted it is still the master a majority
  // of the sentinels names, and says so itself (ROLE), in one round trip; Cluster: whether a
  // majority of the Cluster's masters name it as the owner of the lock's slot (see
  // redis::Client::confirm_current_master). If not (`why` says why), the grant is given back
  // there and the next command asks the sentinels again, or goes to the node the Cluster's
  // majority names. A stale master keeps granting from its queue until it is demoted (Sentinel) or
  // learns of its replica's promotion (Cluster). Always true elsewhere, with no I/O.
  virtual bool confirm_grant(const LockName& name, const std::string& token, std::string& why) = 0;
  // Cluster: learns the other nodes, to follow a failover. Nothing elsewhere.
  virtual void learn_nodes() = 0;

  // One attempt (see lock::try_acquire). A quorum never queues: busy, and take_lock tries again.
  // Fewer than a majority answering throws Error 69 naming the masters that failed (never busy).
  virtual Attempt try_acquire(const LockName& name, const Contender& c, bool queue,
                              const std::vector<std::string>& enclosing) = 0;
  virtual Attempt wait_turn(const LockName& name, const Contender& c, const Attempt& last, util::Millis heartbeat,
                            bool fresh) = 0;
  virtual void cancel(const LockName& name, const std::string& token, bool timed_out) = 0;
  // Sentinel: the release goes to the master a majority of the sentinels names (with its ROLE),
  // asking them first; a hold taken on a master they no longer name is not_held there. Cluster:
  // likewise to the node a majority of the masters name as the owner of the lock's slot.
  virtual Released release(const LockName& name, const std::string& token, const Ending& ending) = 0;
  // Extends, recording what note says; nullopt when the lock is lost. A quorum throws Error 69 when
  // no majority answered within the validity of lease_ttl, and sets a master that lost the key
  // again with fence.
  virtual std::optional<Extension> extend(const LockName& name, const std::string& token,
                                          std::optional<util::Millis> ttl, util::Millis lease_ttl, int64_t fence,
                                          const ExtendNote& note = {}) = 0;
  virtual ForcedRelease force_release(const LockName& name) = 0;
  virtual LockState inspect(const LockName& name, int max_waiters = 100) = 0;
  // The KEYs of the locks under prefix whose KEY matches the glob pattern, held or waited for.
  virtual std::vector<std::string> scan_keys(const std::string& prefix, const std::string& pattern) = 0;
  // The KEYs under prefix that have a history.
  virtual std::vector<std::string> scan_logs(const std::string& prefix, const std::string& pattern) = 0;
  // The last `range.count` events of the lock's history (between its since and until), oldest
  // first; after `range.after` (a stream id) when given, the first `count` after it.
  virtual std::vector<Event> read_log(const LockName& name, const LogRange& range) = 0;
  std::vector<Event> read_log(const LockName& name, size_t count, const std::string& after) {
    LogRange range;
    range.count = count;
    range.after = after;
    return read_log(name, range);
  }
  // The KEYs under prefix that have a summary (PREFIX{KEY}:sum).
  virtual std::vector<std::string> scan_summaries(const std::string& prefix, const std::string& pattern) = 0;
  // The lock's summary (a quorum: every master's, merged; see merge_summaries).
  virtual Summary read_summary(const LockName& name) = 0;
  virtual void confirm_replicas(const LockName& name, int n, util::Millis timeout) = 0;
  // After a loss: whether the server started less than `held` ago, so that a lock held that long
  // went with a restart, said for a message (its run_id, uptime and persistence); nullopt when it
  // did not, or cannot tell (a quorum counts a restarted master out itself).
  virtual std::optional<std::string> restarted_within(util::Millis held) {
    (void)held;
    return std::nullopt;
  }

  // Before the first command: asks for what the server's eviction policy is with the greeting
  // (strict: at once, with INFO, and refuses a server that can evict locks); after: warns about
  // such a server.
  virtual void check_eviction_before(const LockName& name, bool strict) = 0;
  virtual void check_eviction_after(bool strict) = 0;

protected:
  explicit Backend(Timing timing) : m_timing(timing) {}

private:
  Timing m_timing;
};

// The two implementations: one Redis (single.cpp), a Redlock quorum of several (redlock.cpp).
std::unique_ptr<Backend> single_backend(const Servers& servers, Timing timing);
std::unique_ptr<Backend> quorum_backend(const Servers& servers, Timing timing, util::Millis per_node);

// The backend for servers: one Redis for one URL, a Redlock quorum for several. ttl: the lease
// length, from which a quorum's per-node timeout defaults (nullopt for commands that take no
// lock: the I/O timeout then).
std::unique_ptr<Backend> open_backend(const Servers& servers, std::optional<util::Millis> ttl);

// A quorum's per-node timeout: --node-timeout, else 2% of the TTL, at least 50ms, at most the
// I/O timeout (the I/O timeout when no TTL is known).
util::Millis node_timeout(const Servers& servers, std::optional<util::Millis> ttl);

}  // namespace rlock::lock
