#pragma once

namespace rlock::util {

// Which of the standard descriptors the caller had closed, as found by open_standard_fds.
struct ClosedFds {
  bool in = false, out = false, err = false;
};

// Opens /dev/null on each of fds 0, 1 and 2 that is closed, before anything else opens a file:
// otherwise the next socket or file opened would take its number, and output meant for the
// terminal would go into it (a Redis connection as stdout). Returns which ones were closed.
ClosedFds open_standard_fds();

}  // namespace rlock::util
