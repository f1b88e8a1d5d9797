#pragma once

#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "lock/node.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// What status shows of one lock (never its token).
struct LockState {
  std::string key;
  bool held = false;
  Holder holder;
  std::optional<int64_t> since_ms;       // when it was taken, server clock, ms since the epoch
  std::optional<int64_t> held_for_ms;    // server now - since
  std::optional<int64_t> ttl_left_ms;    // nullopt: no TTL set on the key
  std::optional<int64_t> lease_ms;       // the TTL it was taken or last extended with
  std::optional<int64_t> fence;          // last fencing token handed out for this key
};

// Reads one lock's state in one round trip.
LockState inspect(Node& node, const LockName& name);

// The KEYs of the locks under prefix whose KEY matches the glob pattern (SCAN, never KEYS).
std::vector<std::string> scan_keys(Node& node, const std::string& prefix, const std::string& pattern);

}  // namespace rlock::lock
