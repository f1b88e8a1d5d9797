#include "child.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "util/fd.hpp"
#include "util/file.hpp"
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

void exec_failed(const std::string& program, const std::string& path, int err) {
  const std::string shown = util::printable(program);
  if (err == ENOENT && !path.empty() && ::access(path.c_str(), F_OK) == 0) {
    // The file is there: what is missing is the interpreter its first line names.
    std::string interpreter = "the interpreter named on its #! line";
    try {
      std::string head = util::read_small_prefix(path, 256);
      if (head.rfind("#!", 0) == 0) {
        std::string_view line = util::trim(std::string_view(head).substr(2, head.find('\n') - 2));
        interpreter = util::printable(line.substr(0, line.find_first_of(" \t")));
      }
    } catch (const std::exception&) {
    }
    throw Error(exit_code::k_not_executable,
                fmt::format("{}: bad interpreter: {}: no such file or directory", shown, interpreter));
  }
  if (err == ENOENT) throw Error(exit_code::k_not_found, fmt::format("{}: command not found", shown));
  throw Error(exit_code::k_not_executable, fmt::format("{}: cannot execute: {}", shown, std::strerror(err)));
}

namespace {

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
    if (int err = executable_error(program)) exec_failed(program, "", err);
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
  exec_failed(program, "", first_error);
}

namespace {

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

ExecImage::ExecImage(const SpawnSpec& spec)
    : m_argv_strings(spec.argv), m_sh_strings{"/bin/sh", spec.path}, m_env_strings(child_environment(spec)) {
  m_sh_strings.insert(m_sh_strings.end(), spec.argv.begin() + 1, spec.argv.end());
  m_argv = pointers(m_argv_strings);
  m_sh_argv = pointers(m_sh_strings);
  m_envp = pointers(m_env_strings);
}

}  // namespace rlock::proc
