#pragma once

#include "util/clock.hpp"

#include <chrono>

// A fake clock for the unit tests: a point on the monotonic clock the leases use, moved by hand.
struct FakeClock {
  rlock::util::BootClock::time_point now{std::chrono::hours(1)};
  void advance(rlock::util::BootClock::duration d) { now += d; }
};
