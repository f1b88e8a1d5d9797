#include "watch.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "proc/ancestry.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>

namespace rlock::proc {

Watched::Watched(pid_t pid) : m_pid(pid) {
  std::optional<uint64_t> before = start_time(pid);
  if (!before) throw Error(exit_code::k_usage, fmt::format("there is no process {} to watch", pid));
  m_start = *before;
#ifdef SYS_pidfd_open
  m_pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#endif
  // The pid named the process whose start time we read, and the pidfd names it still: a pid that
  // ended and was reused in between shows another start time.
  std::optional<uint64_t> after = start_time(pid);
  if (!after || *after != m_start) throw Error(exit_code::k_usage, fmt::format("process {} ended", pid));
}

bool Watched::ended() const {
  if (m_pidfd.valid()) {
    pollfd p{m_pidfd.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  std::optional<uint64_t> now = start_time(m_pid);
  return !now || *now != m_start || !process_alive(m_pid);
}

}  // namespace rlock::proc
