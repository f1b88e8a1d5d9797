#include "validity.hpp"

#include <algorithm>

namespace rlock::lock::validity {

using util::Millis;

Millis drift(Millis ttl) { return ttl / 100 + Millis(2); }

Millis guard(Millis ttl) { return std::clamp(ttl / 20, Millis(5), Millis(100)); }

Millis renew_interval(Millis ttl) { return ttl / 3; }

Millis renew_jitter(Millis ttl) { return ttl / 30; }

Millis retry_interval(Millis ttl) { return std::clamp(ttl / 60, Millis(10), Millis(250)); }

Millis max_kill_after(Millis ttl) { return ttl / 2 - drift(ttl) - guard(ttl); }

}  // namespace rlock::lock::validity
