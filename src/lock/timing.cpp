#include "timing.hpp"

#include <fmt/core.h>

namespace rlock::lock {

Timing Timing::standard(int log_length) {
  Timing t;
  t.log_length = log_length;
  return t;
}

Timing Timing::quiet() const {
  Timing t = *this;
  t.log_length = 0;
  t.summary = false;
  return t;
}

std::string Timing::script_config() const {
  return fmt::format("{} {} {} {} {} {}", lease.count(), claim.count(), mailbox.count(), history.count(), log_length,
                     summary ? 1 : 0);
}

}  // namespace rlock::lock
