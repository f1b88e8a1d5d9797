#pragma once

#include "lock/backend.hpp"
#include "lock/name.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"

#include <poll.h>

#include <memory>
#include <optional>
#include <string>

namespace rlock::redis {
class Client;
class Connection;
}  // namespace rlock::redis

namespace rlock::lock {

// --preemptible: a BLPOP on the hold's own mailbox, on a connection of its own, driven by the
// caller's poll (run's loop). A --preempt request pushes the mailbox, so the holder learns of it
// within a round trip, not at its next renewal; idle, it costs one connection and one BLPOP per
// block (the TTL/3, within 1s to 30s). A failure is retried a second later; renewals still
// notice a request meanwhile.
class PreemptWatch {
public:
  // The watch of hold `id`'s mailbox, on a backend of one server; nullopt on a quorum (its
  // renewals bring the requests).
  static std::optional<PreemptWatch> open(Backend& backend, const LockName& name, const std::string& id,
                                          util::Millis ttl);

  PreemptWatch(PreemptWatch&&) noexcept;
  PreemptWatch& operator=(PreemptWatch&&) noexcept;
  ~PreemptWatch();

  // What to poll (fd -1: nothing now).
  pollfd pending() const;
  // When step() must run at the latest: at once when the answer came within the BLPOP's start (a
  // mailbox pushed before it), which leaves nothing to poll.
  util::BootClock::time_point wake() const;
  // Moves the watch on (after the poll, whatever woke it); true when the mailbox was pushed.
  bool step();

private:
  PreemptWatch(redis::Client& client, std::string mailbox, util::Millis block);
  void start();
  void failed(const std::string& why);

  redis::Client* m_client;
  std::string m_mailbox;
  util::Millis m_block;
  std::unique_ptr<redis::Connection> m_connection;
  bool m_running = false;
  util::BootClock::time_point m_retry_at{};
};

}  // namespace rlock::lock
