#pragma once

#include <poll.h>

#include <chrono>
#include <optional>

namespace rlock::util {

// CLOCK_BOOTTIME as a std::chrono clock: monotonic, and unlike CLOCK_MONOTONIC it keeps counting
// while the system is suspended, so a deadline on it passes during a suspend as it does for the
// Redis server's copy of the lease.
struct BootClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<BootClock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept;
};

// The time left until deadline in whole milliseconds, rounded up, never negative.
std::chrono::milliseconds left_until(BootClock::time_point deadline);

// poll(2) that returns at deadline on CLOCK_BOOTTIME (nullopt: no deadline), counting time spent
// suspended; a timerfd joins the poll for that. Returns poll's result (0 when the deadline
// passed); EINTR is retried.
int poll_until(pollfd* fds, nfds_t count, std::optional<BootClock::time_point> deadline);

}  // namespace rlock::util
