#include "standard_fds.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace rlock::util {

ClosedFds open_standard_fds() {
  ClosedFds closed;
  bool* flags[] = {&closed.in, &closed.out, &closed.err};
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    *flags[fd] = true;
    // open returns the lowest free number: this one, as the ones below are open by now.
    int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) {
      ::dup2(opened, fd);
      ::close(opened);
    }
  }
  return closed;
}

}  // namespace rlock::util
