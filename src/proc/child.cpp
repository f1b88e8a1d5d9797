#include "child.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "util/fd.hpp"
#include "util/text.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace rlock::proc {

namespace {

// The errno of a failed exec as a shell reports it.
[[noreturn]] void exec_failed(const std::string& program, int err) {
  if (err == ENOENT) throw Error(exit_code::k_not_found, fmt::format("{}: command not found", program));
  throw Error(exit_code::k_not_executable, fmt::format("{}: cannot execute: {}", program, std::strerror(err)));
}

int executable_error(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno;
  if (S_ISDIR(st.st_mode)) return EISDIR;
  if (::access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

}  // namespace

int exit_code_of(int wait_status) {
  if (WIFSIGNALED(wait_status)) return exit_code::k_signal_base + WTERMSIG(wait_status);
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return exit_code::k_internal;
}

void check_executable(const std::string& program) {
  if (program.empty()) throw Error(exit_code::k_not_found, "empty command name: command not found");
  if (program.find('/') != std::string::npos) {
    if (int err = executable_error(program)) exec_failed(program, err);
    return;
  }
  const char* path = std::getenv("PATH");
  int first_error = ENOENT;
  for (const std::string& dir : util::split(path ? path : "/usr/local/bin:/usr/bin:/bin", ":")) {
    int err = executable_error(dir + "/" + program);
    if (err == 0) return;
    if (err != ENOENT && first_error == ENOENT) first_error = err;
  }
  exec_failed(program, first_error);
}

Child::Child(const SpawnSpec& spec) {
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error(exit_code::k_system, fmt::format("pipe: {}", std::strerror(errno)));
  util::Fd read_end(pipe_fds[0]);
  util::Fd write_end(pipe_fds[1]);

  bool foreground = ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(exit_code::k_system, fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);
    if (foreground) ::tcsetpgrp(STDIN_FILENO, ::getpid());  // SIGTTOU is blocked: no stop
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(exit_code::k_system);  // rlock died before prctl
    for (const auto& [name, value] : spec.env) ::setenv(name.c_str(), value.c_str(), 1);
    if (spec.mask) ::sigprocmask(SIG_SETMASK, spec.mask, nullptr);
    ::execvp(argv[0], argv.data());
    int err = errno;
    [[maybe_unused]] ssize_t ignored = ::write(write_end.get(), &err, sizeof err);
    ::_exit(err == ENOENT ? exit_code::k_not_found : exit_code::k_not_executable);
  }
  m_pid = pid;
  ::setpgid(pid, pid);  // also here, so the group exists before we signal it
  if (foreground) m_owns_terminal = ::tcsetpgrp(STDIN_FILENO, pid) == 0;
  write_end.reset();
  int err = 0;
  ssize_t n;
  do {
    n = ::read(read_end.get(), &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof err) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    m_reaped = true;
    restore_terminal();
    exec_failed(spec.argv[0], err);
  }
}

Child::~Child() {
  if (!m_reaped && m_pid > 0) {
    // Forgotten (an exception unwound past it): do not leave it running unsupervised.
    ::kill(-m_pid, SIGKILL);
    int status = 0;
    ::waitpid(m_pid, &status, 0);
  }
  restore_terminal();
}

void Child::restore_terminal() {
  if (m_owns_terminal) {
    ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
    m_owns_terminal = false;
  }
}

bool Child::signal_group(int sig) const { return ::kill(-m_pid, sig) == 0; }

bool Child::group_alive() const { return ::kill(-m_pid, 0) == 0 || errno == EPERM; }

std::optional<int> Child::try_reap() {
  if (m_reaped) return std::nullopt;
  int status = 0;
  pid_t r = ::waitpid(m_pid, &status, WNOHANG);
  if (r != m_pid) return std::nullopt;
  m_reaped = true;
  restore_terminal();
  return status;
}

}  // namespace rlock::proc
