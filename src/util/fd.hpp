#pragma once

#include <unistd.h>

#include <utility>

namespace rlock::util {

// Owns a file descriptor and closes it once.
class Fd {
public:
  Fd() = default;
  explicit Fd(int fd) : m_fd(fd) {}
  Fd(Fd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset(std::exchange(other.m_fd, -1));
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return m_fd; }
  bool valid() const { return m_fd >= 0; }
  // Gives up the descriptor without closing it; returns it.
  int release() { return std::exchange(m_fd, -1); }
  // Closes the descriptor held, if any, and takes fd.
  void reset(int fd = -1) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = fd;
  }

private:
  int m_fd = -1;
};

}  // namespace rlock::util
