#include "clock.hpp"

#include "util/fd.hpp"

#include <sys/timerfd.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace rlock::util {

BootClock::time_point BootClock::now() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

std::chrono::milliseconds left_until(BootClock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - BootClock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

namespace {

// One timer for every wait of the process, created on first use.
int boot_timer() {
  static Fd timer(::timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC));
  return timer.get();
}

}  // namespace

int poll_until(pollfd* fds, nfds_t count, std::optional<BootClock::time_point> deadline) {
  if (!deadline) {
    for (;;) {
      int n = ::poll(fds, count, -1);
      if (n >= 0 || errno != EINTR) return n;
    }
  }
  // The poll timeout runs on CLOCK_MONOTONIC, which stops during a suspend: the timer on
  // CLOCK_BOOTTIME, armed at the same instant, ends the wait in time after a resume.
  int timer = boot_timer();
  auto since_epoch = deadline->time_since_epoch();
  itimerspec spec{};
  spec.it_value.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
  spec.it_value.tv_nsec = (since_epoch % std::chrono::seconds(1)).count();
  if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
  bool timed = timer >= 0 && ::timerfd_settime(timer, TFD_TIMER_ABSTIME, &spec, nullptr) == 0;
  pollfd local[8];
  std::vector<pollfd> heap;
  pollfd* all = local;
  nfds_t total = count + (timed ? 1 : 0);
  if (total > std::size(local)) {
    heap.resize(total);
    all = heap.data();
  }
  std::copy(fds, fds + count, all);
  if (timed) all[count] = {timer, POLLIN, 0};
  for (;;) {
    int timeout = static_cast<int>(std::min<int64_t>(left_until(*deadline).count(), 60'000));
    int n = ::poll(all, total, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return n;
    std::copy(all, all + count, fds);
    int ready = 0;
    for (nfds_t i = 0; i < count; ++i) ready += fds[i].revents != 0;
    if (ready > 0) return ready;
    if (BootClock::now() >= *deadline) return 0;
    if (timed && (all[count].revents & POLLIN)) {
      uint64_t expirations = 0;
      [[maybe_unused]] ssize_t r = ::read(timer, &expirations, sizeof expirations);
    }
  }
}

}  // namespace rlock::util
