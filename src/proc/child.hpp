#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rlock::proc {

// The exit code a shell would report for a wait status: the status, or 128+N for death by signal N.
int exit_code_of(int wait_status);

// The path execve should run for program: itself when it has a '/', else the first executable
// match on PATH. Throws rlock::Error 127 when it cannot be found, 126 when it is not executable,
// as a shell reports them.
std::string find_executable(const std::string& program);

// How to start the child of `run`.
struct SpawnSpec {
  std::string path;               // from find_executable
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // set on top of rlock's environment
  const sigset_t* mask = nullptr;                          // the child's signal mask
};

// A child in its own process group, killed with SIGKILL if rlock dies (PR_SET_PDEATHSIG); rlock
// becomes the subreaper of its descendants. When
// rlock runs in the foreground of a terminal, the child's group becomes the foreground group, so
// it can read the terminal and gets ^C directly; the terminal is handed back when it exits.
class Child {
public:
  // Starts the child (clone with CLONE_VM|CLONE_VFORK, like posix_spawn: no page copying);
  // throws rlock::Error 71 when it cannot, and 126/127 when exec fails.
  explicit Child(const SpawnSpec& spec);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return m_pid; }
  // Sends sig to the child's whole process group; false when the group is gone.
  bool signal_group(int sig) const;
  // Whether any process of the child's group is still alive.
  bool group_alive() const;
  // Reaps every exited child of rlock (the child and orphaned descendants); returns the child's
  // wait status when it was among them.
  std::optional<int> try_reap();

private:
  void restore_terminal();

  pid_t m_pid = -1;
  bool m_reaped = false;
  bool m_owns_terminal = false;
};

}  // namespace rlock::proc
