#pragma once

#include "util/fd.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace rlock::proc {

// A process watched for its end: one that is not our child (a keeper watches the script that
// started it). Opened with pidfd_open(2) where the kernel has it, which then becomes readable at
// the process's end; elsewhere checked by polling /proc. The process is named by pid and start
// time, so a pid reused by another process is never mistaken for it.
class Watched {
public:
  // Opens pid. Throws rlock::Error 64 when there is no such process.
  explicit Watched(pid_t pid);

  pid_t pid() const { return m_pid; }
  uint64_t start() const { return m_start; }
  // Readable when the process has ended; -1 without pidfd (poll every k_poll_interval then).
  int fd() const { return m_pidfd.get(); }
  // Whether the process has ended (or is a zombie, or its pid now names another process).
  bool ended() const;
  // The pidfd now lives at fd (moved by dup2; the old number is already closed), or is gone (-1).
  void adopt_fd(int fd) {
    m_pidfd.release();
    m_pidfd.reset(fd);
  }

  static constexpr int k_poll_interval_ms = 200;

private:
  pid_t m_pid;
  uint64_t m_start = 0;
  util::Fd m_pidfd;
};

}  // namespace rlock::proc
