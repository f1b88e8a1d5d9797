#pragma once

#include "util/fd.hpp"

#include <signal.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlock::proc {

// Parses "TERM", "SIGTERM", "term" or "15"; nullopt for anything else.
std::optional<int> parse_signal(std::string_view text);
// "SIGTERM" for 15.
std::string signal_name(int signo);

// Ignores SIGPIPE in rlock (a write to a closed pipe is then an error rlock reports), remembering
// whether the caller had it ignored: a command rlock starts gets the caller's disposition back.
void ignore_sigpipe();
// Whether the caller left SIGPIPE at its default action (so children get it back).
bool sigpipe_was_default();

// Stops this process with the job-control signal sig (TSTP, TTIN, TTOU, STOP), blocked or not,
// and returns once it is continued. With whole_group, the signal goes to the process group too,
// as the terminal would have sent it (rlock's caller: a shell waiting for its job).
void stop_self(int sig, bool whole_group);

// Ends this process with sig (its default action), as the terminal's Ctrl-C or Ctrl-\ would
// have; with whole_group, the process group gets it too, so that a shell script running rlock
// stops as it would have without rlock in between. Returns only if sig does not end it.
void die_by(int sig, bool whole_group);

// Blocks a set of signals for the life of the object and delivers them through a signalfd,
// so they are handled in the event loop and never interrupt anything.
class SignalSet {
public:
  // Blocks `handled` (read from fd()) and `quiet` (blocked only, e.g. SIGTTOU while rlock hands the
  // terminal to its child).
  SignalSet(std::initializer_list<int> handled, std::initializer_list<int> quiet);
  ~SignalSet();
  SignalSet(const SignalSet&) = delete;
  SignalSet& operator=(const SignalSet&) = delete;

  // Readable when a handled signal is pending.
  int fd() const { return m_fd.get(); }
  // The handled signals pending now, in arrival order; does not block.
  std::vector<int> take();
  // The mask in force before this object: what a child must start with.
  const sigset_t& original_mask() const { return m_original; }

private:
  util::Fd m_fd;
  sigset_t m_original{};
};

}  // namespace rlock::proc
