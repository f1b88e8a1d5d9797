#include "signals.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "util/text.hpp"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <strings.h>

namespace rlock::proc {

std::optional<int> parse_signal(std::string_view text) {
  long long number = 0;
  if (util::parse_int(text, 1, SIGRTMAX, number)) return static_cast<int>(number);
  std::string name(text);
  if (name.size() > 3 && strncasecmp(name.c_str(), "SIG", 3) == 0) name = name.substr(3);
  if (name.empty()) return std::nullopt;
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev && strcasecmp(abbrev, name.c_str()) == 0) return s;
  }
  return std::nullopt;
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signo);
}

namespace {

bool g_sigpipe_default = true;

// Sets sig to its default action and unblocks it, then sends it; restores the mask after.
void deliver(int sig, bool whole_group) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  sigset_t one, before;
  ::sigemptyset(&one);
  ::sigaddset(&one, sig);
  ::sigprocmask(SIG_UNBLOCK, &one, &before);
  if (whole_group) {
    ::kill(0, sig);
  } else {
    ::kill(::getpid(), sig);
  }
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
}

}  // namespace

void ignore_sigpipe() {
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigemptyset(&ignore.sa_mask);
  if (::sigaction(SIGPIPE, &ignore, &old) == 0) g_sigpipe_default = old.sa_handler != SIG_IGN;
}

bool sigpipe_was_default() { return g_sigpipe_default; }

void stop_self(int sig, bool whole_group) { deliver(sig, whole_group); }

void die_by(int sig, bool whole_group) { deliver(sig, whole_group); }

SignalSet::SignalSet(std::initializer_list<int> handled, std::initializer_list<int> quiet) {
  sigset_t read_set;
  sigemptyset(&read_set);
  for (int s : handled) sigaddset(&read_set, s);
  sigset_t block_set = read_set;
  for (int s : quiet) sigaddset(&block_set, s);
  if (sigprocmask(SIG_BLOCK, &block_set, &m_original) != 0) {
    throw Error(exit_code::k_system, fmt::format("sigprocmask: {}", std::strerror(errno)));
  }
  m_fd.reset(signalfd(-1, &read_set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!m_fd.valid()) throw Error(exit_code::k_system, fmt::format("signalfd: {}", std::strerror(errno)));
}

SignalSet::~SignalSet() { sigprocmask(SIG_SETMASK, &m_original, nullptr); }

std::vector<int> SignalSet::take() {
  std::vector<int> signals;
  signalfd_siginfo info[8];
  for (;;) {
    ssize_t n = ::read(m_fd.get(), info, sizeof info);
    if (n <= 0) break;
    for (size_t i = 0; i < static_cast<size_t>(n) / sizeof info[0]; ++i) {
      signals.push_back(static_cast<int>(info[i].ssi_signo));
    }
  }
  return signals;
}

}  // namespace rlock::proc
