#pragma once

#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "lock/node.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// One holder of a lock, as status shows it (never its token).
struct HolderState {
  Holder holder;
  std::optional<int64_t> since_ms;     // when it was taken, server clock, ms since the epoch
  std::optional<int64_t> held_for_ms;  // server now - since
  std::optional<int64_t> ttl_left_ms;  // nullopt: no TTL set
  std::optional<int64_t> lease_ms;     // the TTL it was taken or last extended with
  std::optional<int64_t> fence;
  int slot = 0;  // semaphore slot, 1..N
  bool shared = false;
  bool lingering = false;            // --min-hold: released, but kept until ttl_left_ms passes
  bool preemptible = false;          // --preemptible
  std::optional<KeeperInfo> keeper;  // held by a keeper (acquire --keepalive)
  std::optional<int64_t> tick;       // run --once-per: the tick it took (server clock, ms since the epoch)
  bool tick_ran = false;             // ... and its command started (else the tick is pending)
};

// One waiter in a lock's queue.
struct WaiterState {
  Holder holder;
  bool shared = false;
  std::optional<int64_t> since_ms;  // when it joined, server clock
  std::optional<int64_t> waited_ms;
  int position = 0;  // 1 for the head
};

// How one master of a Redlock quorum sees a lock.
struct MasterView {
  std::string url;
  std::string error;  // set when it did not answer
  bool held = false;
  bool agrees = false;  // it shows the holder the majority shows (or is free with them)
  Holder holder;
};

// What status shows of one lock.
struct LockState {
  std::string key;
  bool held = false;
  Mode mode = Mode::exclusive;       // of the holders (meaningful when held)
  std::optional<int> limit;          // a semaphore's N
  std::vector<HolderState> holders;  // the exclusive holder, or the shared or semaphore ones (the first ones)
  int holder_count = 0;              // all of them
  std::optional<int64_t> fence;      // last fencing token handed out for this key
  int queue_length = 0;
  std::vector<WaiterState> waiters;  // the first ones, up to the number asked
  std::vector<MasterView> masters;   // Redlock: every master's view (empty for one Redis)
  int agreeing = 0;                  // Redlock: masters that agree with the majority's view
};

// Reads one lock's state in two round trips of single-key commands (no script: a read-only ACL
// user may run them), with at most `most` holders and waiters: the work is bounded whatever the
// queue holds.
LockState inspect(Node& node, const LockName& name, int most = 100);

// The same in parts, for a multi-node exchange (Redlock): the first round's commands; the second
// round's, from the first round's replies; and what both say. The exclusive holder's public id
// (its token's first 16 characters) comes back in *holder_id.
std::vector<redis::Command> inspect_first(const LockName& name, int most);
std::vector<redis::Command> inspect_second(const LockName& name, const std::vector<redis::Reply>& first);
LockState parse_inspect(const LockName& name, const std::vector<redis::Reply>& first,
                        const std::vector<redis::Reply>& second, std::string* holder_id = nullptr);

// The KEYs of the locks under prefix whose KEY matches the glob pattern, held or waited for
// (SCAN, never KEYS); with `logs`, those that have a history instead.
std::vector<std::string> scan_keys(Node& node, const std::string& prefix, const std::string& pattern,
                                   bool logs = false);

}  // namespace rlock::lock
