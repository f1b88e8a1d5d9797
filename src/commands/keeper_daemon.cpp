#include "commands/keeper_parts.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "util/clock.hpp"
#include "util/fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <exception>

namespace rlock::commands::keeper {

namespace {

using Clock = util::BootClock;
using util::Millis;
using namespace detail;

// Moves fd to exactly target (closing what was there), without close-on-exec.
int move_fd(int fd, int target) {
  if (fd < 0) return -1;
  if (fd != target && ::dup2(fd, target) < 0) return -1;
  return target;
}

// Every descriptor from first on is closed.
void close_from(int first) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
  for (int fd = first; fd < 65536; ++fd) ::close(fd);
}

[[noreturn]] void become_keeper(const Spec& spec, proc::Watched& watched, int armed, const std::string& path) {
  // Detach: a session of its own, no terminal, stdio on /dev/null, no descriptor of the caller's
  // (so $(rlock acquire k --keepalive) returns at once), at / (no directory kept busy).
  ::setsid();
  ::prctl(PR_SET_NAME, "rlock keeper");
  int pidfd = watched.fd();
  // 3: the watched process, 4: the armed pipe; then nothing else.
  int spare = ::fcntl(armed, F_DUPFD_CLOEXEC, 10);
  if (pidfd >= 0) pidfd = move_fd(pidfd, 3);
  armed = move_fd(spare, 4);
  close_from(5);
  int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
  if (null > 2) ::close(null);
  if (::chdir("/") != 0) {
    // Nothing holds us here: an inherited directory is only kept busy.
  }
  log::set_level(log::Level::quiet);
  if (!spec.log_target.empty()) {
    if (spec.log_target == "syslog:") {
      log::use_syslog();
    } else {
      int f = ::open(spec.log_target.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (f >= 0) ::dup2(f, 2), ::close(f);
    }
    log::set_level(log::Level::verbose);
  }
  watched.adopt_fd(pidfd);
  ::_exit(keep(spec, watched, path, armed));
}

}  // namespace

pid_t start(const Spec& spec, proc::Watched& watched) {
  std::string dir = state_dir(true);
  std::string path = state_file(dir, lock::id_of(spec.token));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw Error(exit_code::k_system, fmt::format("cannot start the keeper: pipe: {}", std::strerror(errno)));
  }
  log::flush(Clock::now() + Millis(100));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    throw Error(exit_code::k_system, fmt::format("cannot start the keeper: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(pipe_fds[0]);
    become_keeper(spec, watched, pipe_fds[1], path);
  }
  ::close(pipe_fds[1]);
  util::Fd armed(pipe_fds[0]);
  // Armed: it watches, renewed once and recorded itself; or it says why not, or dies.
  std::string answer;
  auto until = Clock::now() + spec.connect.timeouts.connect + 2 * spec.connect.timeouts.command + Millis(2000);
  for (;;) {
    pollfd p{armed.get(), POLLIN, 0};
    if (util::poll_until(&p, 1, until) <= 0) break;
    char buffer[512];
    ssize_t n = ::read(armed.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  if (answer == "A") return pid;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::unlink(path.c_str());
  std::string why = answer.size() > 1 ? answer.substr(1) : "it did not start";
  throw Error(exit_code::k_unavailable, fmt::format("the keeper of {} could not be armed: {}", spec.name.key, why));
}

}  // namespace rlock::commands::keeper
