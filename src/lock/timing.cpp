#include "timing.hpp"

#include "util/text.hpp"

#include <fmt/core.h>

#include <cstdlib>

namespace rlock::lock {

Timing Timing::standard(int log_length) {
  Timing t;
  t.log_length = log_length;
  long long percent = 100;
  if (const char* scale = std::getenv("RLOCK_TEST_TIME_PERCENT");
      scale && util::parse_int(scale, 1, 100, percent) && percent < 100) {
    t.heartbeat = t.heartbeat * percent / 100;
    t.lease = t.lease * percent / 100;
    t.claim = t.claim * percent / 100;
  }
  return t;
}

Timing Timing::quiet() const {
  Timing t = *this;
  t.log_length = 0;
  return t;
}

std::string Timing::script_config() const {
  return fmt::format("{} {} {} {} {}", lease.count(), claim.count(), mailbox.count(), history.count(), log_length);
}

}  // namespace rlock::lock
