#pragma once

#include "util/duration.hpp"

#include <optional>

namespace rlock::lock {

// The pause between attempts while waiting for a busy lock: grows from 10ms by half each time up
// to 500ms, never sleeps past the holder's remaining TTL, and is jittered by +-25% so that
// waiters started together spread out.
class Backoff {
public:
  // The next pause, given the holder's TTL left (nullopt when unknown or without a TTL).
  util::Millis next(std::optional<util::Millis> holder_ttl_left);

  static constexpr util::Millis k_first{10};
  static constexpr util::Millis k_max{500};

private:
  util::Millis m_current{k_first};
};

}  // namespace rlock::lock
