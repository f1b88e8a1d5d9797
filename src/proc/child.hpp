#pragma once

#include <signal.h>
#include <sys/types.h>

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

// Throws the rlock::Error a shell's exit code stands for when exec of program (found at path)
// failed with err. A script whose #! interpreter is missing fails with ENOENT although it exists:
// that is "bad interpreter" (126), as bash says, not "command not found".
[[noreturn]] void exec_failed(const std::string& program, const std::string& path, int err);

// How to start the child of `run`.
struct SpawnSpec {
  std::string path;  // from find_executable
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // set on top of rlock's environment
  const sigset_t* mask = nullptr;                        // the child's signal mask
  bool sigpipe_default = true;                           // SIGPIPE back to its default action (rlock ignores it)
};

// The argv and environment arrays execve takes, built from a spec before the clone: the process
// that execs shares rlock's memory and must not allocate.
class ExecImage {
public:
  explicit ExecImage(const SpawnSpec& spec);
  char* const* argv() { return m_argv.data(); }
  char* const* sh_argv() { return m_sh_argv.data(); }  // /bin/sh PATH ARGS...: for a file without #!
  char* const* envp() { return m_envp.data(); }

private:
  std::vector<std::string> m_argv_strings, m_sh_strings, m_env_strings;
  std::vector<char*> m_argv, m_sh_argv, m_envp;
};

}  // namespace rlock::proc
