#include "backoff.hpp"

#include "util/random.hpp"

#include <algorithm>

namespace rlock::lock {

util::Millis Backoff::next(std::optional<util::Millis> holder_ttl_left) {
  util::Millis base = m_current;
  m_current = std::min(k_max, m_current + m_current / 2);
  if (holder_ttl_left && *holder_ttl_left >= util::Millis(0)) {
    // The lock expires then at the latest: try again just after.
    base = std::min(base, *holder_ttl_left + util::Millis(1));
  }
  auto quarter = static_cast<uint64_t>(std::max<int64_t>(base.count() / 4, 1));
  auto jitter = static_cast<int64_t>(util::random_below(2 * quarter + 1)) - static_cast<int64_t>(quarter);
  return std::max(util::Millis(1), base + util::Millis(jitter));
}

}  // namespace rlock::lock
