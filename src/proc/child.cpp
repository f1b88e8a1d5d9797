#include "child.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "util/fd.hpp"
#include "util/text.hpp"

#include <fcntl.h>
#include <sched.h>
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

std::string find_executable(const std::string& program) {
  if (program.empty()) throw Error(exit_code::k_not_found, "empty command name: command not found");
  if (program.find('/') != std::string::npos) {
    if (int err = executable_error(program)) exec_failed(program, err);
    return program;
  }
  const char* path = std::getenv("PATH");
  int first_error = ENOENT;
  for (const std::string& dir : util::split(path ? path : "/usr/local/bin:/usr/bin:/bin", ":")) {
    std::string candidate = dir + "/" + program;
    int err = executable_error(candidate);
    if (err == 0) return candidate;
    if (err != ENOENT && first_error == ENOENT) first_error = err;
  }
  exec_failed(program, first_error);
}

namespace {

// What the cloned child needs, prepared before the clone: it shares rlock's memory until it
// execs, so it must not allocate or touch anything but this.
struct Launch {
  const char* path;
  char* const* argv;
  char* const* sh_argv;  // for a file without #!: run it with /bin/sh, as execvp does
  char* const* envp;
  const sigset_t* mask;
  bool foreground;
  pid_t parent;
  int exec_errno;  // written by the child when exec fails
};

int launch_child(void* arg) {
  auto* l = static_cast<Launch*>(arg);
  ::setpgid(0, 0);
  if (l->foreground) ::tcsetpgrp(STDIN_FILENO, ::getpid());  // SIGTTOU is blocked: no stop
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != l->parent) ::_exit(exit_code::k_system);  // rlock died before prctl
  if (l->mask) ::sigprocmask(SIG_SETMASK, l->mask, nullptr);
  ::execve(l->path, l->argv, l->envp);
  if (errno == ENOEXEC) ::execve("/bin/sh", l->sh_argv, l->envp);
  l->exec_errno = errno;
  ::_exit(errno == ENOENT ? exit_code::k_not_found : exit_code::k_not_executable);
}

// rlock's environment with spec.env set on top.
std::vector<std::string> child_environment(const SpawnSpec& spec) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : spec.env) {
      if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=') {
        replaced = true;
      }
    }
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : spec.env) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

Child::Child(const SpawnSpec& spec) {
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv = pointers(argv_strings);
  std::vector<std::string> sh_strings = {"/bin/sh", spec.path};
  sh_strings.insert(sh_strings.end(), spec.argv.begin() + 1, spec.argv.end());
  std::vector<char*> sh_argv = pointers(sh_strings);
  std::vector<std::string> env_strings = child_environment(spec);
  std::vector<char*> envp = pointers(env_strings);

  Launch launch{spec.path.c_str(), argv.data(), sh_argv.data(), envp.data(), spec.mask,
                ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp(), ::getpid(), 0};
  // Orphaned grandchildren come to rlock, which reaps them: the group's end is then observable.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  alignas(64) static char stack[64 * 1024];
  pid_t pid = ::clone(launch_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &launch);
  if (pid < 0) throw Error(exit_code::k_system, fmt::format("cannot start the command: {}", std::strerror(errno)));
  // CLONE_VFORK: the child has exec'd or exited by now.
  m_pid = pid;
  ::setpgid(pid, pid);  // may fail after exec (EACCES): the child did it already
  if (launch.foreground) m_owns_terminal = ::tcsetpgrp(STDIN_FILENO, pid) == 0;
  if (launch.exec_errno != 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    m_reaped = true;
    restore_terminal();
    exec_failed(spec.argv[0], launch.exec_errno);
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
  std::optional<int> result;
  int status = 0;
  pid_t r;
  // Also reaps orphaned descendants handed to rlock as their subreaper, so that a finished
  // process group is really gone rather than left as zombies.
  while ((r = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (r == m_pid && !m_reaped) {
      m_reaped = true;
      restore_terminal();
      result = status;
    }
  }
  return result;
}

}  // namespace rlock::proc
