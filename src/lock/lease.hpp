#pragma once

#include "error.hpp"
#include "lock/name.hpp"
#include "lock/node.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// Who takes a lock, as shown by status (never the token).
struct Holder {
  std::string host;
  std::string pid;
  std::string user;
  std::string command;
};

// The answer to one attempt at taking a lock.
struct Attempt {
  enum class Outcome { acquired, reentered, busy };

  Outcome outcome = Outcome::busy;
  util::BootClock::time_point sent_at;  // when the request left: the lease counts from here
  int64_t fence = 0;                      // acquired, reentered
  size_t enclosing = 0;                   // reentered: the index of the enclosing token that owns it
  std::optional<util::Millis> ttl_left;   // busy, reentered: the holder's PTTL; nullopt when it has no TTL
  Holder holder;                          // busy: who holds it (as far as its info says)
  std::optional<util::Millis> held_for;   // busy: since when, by the server's clock
};

// Tries once to take the lock with token, atomically, recording holder info and the next fencing token.
// A lock owned by one of enclosing_tokens (holds of the calling process tree) is re-entered.
Attempt try_acquire(Node& node, const LockName& name, const std::string& token, util::Millis ttl,
                    const Holder& holder, const std::vector<std::string>& enclosing_tokens);

// Waits for n replicas to acknowledge the acquisition (WAIT, best effort: Redis replication is
// asynchronous). Throws rlock::Error 69 when fewer answer within timeout.
void confirm_replicas(Node& node, const LockName& name, int n, util::Millis timeout);

// Deletes the lock if token owns it; false when it no longer does.
bool release(Node& node, const LockName& name, const std::string& token);

// What a successful extend found and did.
struct Extension {
  std::optional<util::Millis> ttl_left_before;  // the lease's PTTL just before it was reset
  util::Millis ttl{0};                          // the TTL it was reset to
};

// Resets the lock's TTL if token owns it, to ttl or (nullopt) the TTL the lock was taken with;
// nullopt when the token no longer owns it.
std::optional<Extension> extend(Node& node, const LockName& name, const std::string& token,
                                std::optional<util::Millis> ttl);

// What release --force removed.
struct ForcedRelease {
  bool was_held = false;
  Holder holder;
  std::optional<int64_t> fence;
};

// Deletes the lock whoever holds it.
ForcedRelease force_release(Node& node, const LockName& name);

// The server cannot serve the lock for a moment (TRYAGAIN, LOADING, CLUSTERDOWN...): exit 69,
// but worth retrying while a --wait lasts.
class TransientError : public Error {
public:
  using Error::Error;
};

// Throws the rlock::Error that an error reply to a lock script means (65 for foreign data at the
// lock's name, 70 for anything unexpected).
void check_reply(const redis::Reply& reply, const LockName& name);

}  // namespace rlock::lock
