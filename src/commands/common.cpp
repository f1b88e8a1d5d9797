#include "common.hpp"

#include "commands/keeper.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/server.hpp"
#include "log.hpp"
#include "proc/ancestry.hpp"
#include "util/file.hpp"
#include "util/random.hpp"
#include "util/text.hpp"

#include <pwd.h>
#include <unistd.h>

#include <fmt/core.h>

#include <set>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <system_error>

namespace rlock::commands {

namespace {

using Clock = util::BootClock;

// A token is what random_token makes; anything else in a token file is garbage.
bool plausible_token(std::string_view token) {
  if (token.size() < 16 || token.size() > 256) return false;
  for (char c : token) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// One updating line on a terminal while waiting.
bool dumb_terminal() {
  const char* term = std::getenv("TERM");
  return !term || !*term || std::string_view(term) == "dumb";
}

// Whether a CI runs rlock: the variables the common CIs set.
bool in_ci() {
  for (const char* name : {"CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL"}) {
    const char* value = std::getenv(name);
    if (value && *value && std::string_view(value) != "false" && std::string_view(value) != "0") return true;
  }
  return false;
}

// The longest free text the holder's record keeps of a --note or a CI job's URL.
constexpr size_t k_record_text_max = 200;

// text, cut to at most `bytes` at a character's start (a UTF-8 sequence is never split).
std::string at_most_bytes(const std::string& text, size_t bytes) {
  if (text.size() <= bytes) return text;
  size_t n = bytes;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

// The CI job rlock runs in, as a URL a person can open (empty outside a CI): GitHub Actions'
// run, GitLab's job, Buildkite's and CircleCI's build, Jenkins' build. At most 200 bytes.
std::string ci_job_url() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  std::string url;
  if (!env("GITHUB_RUN_ID").empty() && !env("GITHUB_REPOSITORY").empty()) {
    std::string server = env("GITHUB_SERVER_URL").empty() ? "https://github.com" : env("GITHUB_SERVER_URL");
    url = fmt::format("{}/{}/actions/runs/{}", server, env("GITHUB_REPOSITORY"), env("GITHUB_RUN_ID"));
  } else {
    for (const char* name : {"CI_JOB_URL", "BUILDKITE_BUILD_URL", "CIRCLE_BUILD_URL", "BUILD_URL"}) {
      if (!(url = env(name)).empty()) break;
    }
  }
  return at_most_bytes(url, k_record_text_max);
}

// " by HOST pid PID for DURATION (CMD)", and with context the CI job it runs in and its --note
// (each at most as long as rlock records them: the server's copy may be longer), so that whoever
// waits sees who to ask, as status -v shows them.
std::string holder_text(const lock::Attempt& a, bool context = true) {
  std::string who;
  if (!a.holder.host.empty()) who = fmt::format(" by {} pid {}", a.holder.host, a.holder.pid);
  if (a.held_for) who += fmt::format(" for {}", util::format_duration(*a.held_for));
  if (!a.holder.cmd.empty()) who += fmt::format(" ({})", a.holder.cmd);
  if (!context) return who;
  if (!a.holder.job.empty()) who += fmt::format(" in CI job {}", at_most_bytes(a.holder.job, k_record_text_max));
  if (!a.holder.note.empty()) who += fmt::format(": {}", at_most_bytes(a.holder.note, k_record_text_max));
  return who;
}

}  // namespace

lock::LockName lock_name(const ConnectOptions& connect, const std::string& key) { return {connect.prefix, key}; }

bool is_pattern(const std::string& key) { return key.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> matching_locks(lock::Backend& backend, const std::string& prefix, const std::string& pattern) {
  std::set<std::string> found;
  for (std::string& k : backend.scan_keys(prefix, pattern)) found.insert(std::move(k));
  for (std::string& k : backend.scan_summaries(prefix, pattern)) found.insert(std::move(k));
  return {found.begin(), found.end()};
}

lock::Holder this_holder(const std::string& command) {
  lock::Holder h;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) h.host = host;
  h.pid = std::to_string(::getpid());
  const char* user = std::getenv("USER");
  if (!user || !*user) user = std::getenv("LOGNAME");
  if (user && *user) {
    h.user = user;
  } else if (const passwd* pw = ::getpwuid(::getuid())) {  // only when the environment does not say
    h.user = pw->pw_name;
  } else {
    h.user = fmt::format("uid {}", ::getuid());
  }
  h.cmd = command.size() > 200 ? command.substr(0, 197) + "..." : command;
  h.job = ci_job_url();
  return h;
}

std::vector<lock::Hold> enclosing_holds() {
  std::vector<lock::Hold> holds = run_holds();
  std::vector<lock::Hold> kept = keeper::enclosing_holds();
  holds.insert(holds.end(), kept.begin(), kept.end());
  return holds;
}

std::vector<lock::Hold> run_holds() {
  const char* value = std::getenv(lock::k_holds_variable);
  if (!value || !*value) return {};
  std::vector<lock::Hold> holds = lock::parse_holds(value);
  // Only the holder's own tree re-enters: not a process that inherited the variable and left it
  // (setsid'ed away from an ended run, ssh SendEnv, sudo -E from another session, a copy).
  std::erase_if(holds, [](const lock::Hold& h) {
    return h.boot_id.empty() || h.boot_id != proc::boot_id() || !proc::descends_from(h.anchor, h.anchor_start);
  });
  return holds;
}

void write_stdout(const std::string& text) {
  const char* data = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(exit_code::k_system, fmt::format("cannot write to standard output: {}", std::strerror(errno)));
    data += n;
    left -= static_cast<size_t>(n);
  }
}

std::string busy_message(const lock::LockName& name, const lock::Attempt& attempt) {
  std::string queue = attempt.queue_length > 0 ? fmt::format("; {} waiting", attempt.queue_length) : "";
  if (attempt.lingering) {
    std::string until;
    if (attempt.ttl_left) {
      // In UTC, as status and log give times; whole seconds, rounded up.
      int64_t at = std::time(nullptr) + (attempt.ttl_left->count() + 999) / 1000;
      std::string text = util::iso_time(at * 1000);
      text.erase(text.size() - 5, 4);  // the milliseconds (".000") before the Z
      until = fmt::format(" until {} ({} left)", text, util::format_duration(*attempt.ttl_left));
    }
    return fmt::format("{} is lingering: taken{} and released, it stays taken (--min-hold){}{}", name.key,
                       holder_text(attempt, false), until, queue);
  }
  if (attempt.overrun) {
    return fmt::format("{} is still held by the run of the tick of {}{}: this tick is skipped (overrun){}", name.key,
                       tick_time(*attempt.overrun), holder_text(attempt, false), queue);
  }
  if (attempt.holder.host.empty() && attempt.queue_length > 0) {
    return fmt::format("{} has {} waiting before this request", name.key, attempt.queue_length);
  }
  return fmt::format("{} is held{}{}", name.key, holder_text(attempt), queue);
}

std::string tick_time(int64_t ms) {
  std::string text = util::iso_time((ms + 500) / 1000 * 1000);
  text.erase(text.size() - 5, 4);  // the milliseconds (".000") before the Z
  return text;
}

std::string tick_done_message(const lock::LockName& name, const lock::Attempt& attempt, util::Millis period) {
  std::string ago = attempt.held_for ? fmt::format(" ({} ago)", util::format_duration(*attempt.held_for)) : "";
  // The tick that ran is this run's when they fired less than half a period apart.
  bool later = attempt.own_tick > 0 && attempt.tick - attempt.own_tick >= period.count() / 2;
  std::string which = later ? fmt::format("a later tick ({})", tick_time(attempt.tick))
                            : fmt::format("the tick of {}", tick_time(attempt.tick));
  return fmt::format("{}: {} already ran on {} at {}{}; skipped (--once-per)", name.key, which,
                     util::printable(attempt.holder.host.empty() ? "?" : attempt.holder.host),
                     util::iso_time(attempt.tick_at), ago);
}

std::string who_text(const lock::Holder& h) {
  std::string out = fmt::format("{} pid {}", util::printable(h.host), util::printable(h.pid));
  if (!h.user.empty()) out += fmt::format(" user {}", util::printable(h.user));
  if (!h.cmd.empty()) out += fmt::format(" ({})", util::printable(h.cmd));
  return out;
}

std::string superseded_message(const lock::LockName& name, const lock::Attempt& attempt, const char* flag) {
  return fmt::format("a newer request for {} superseded this one ({}): {}", name.key, flag,
                     who_text(attempt.superseded_by));
}

void PreemptNotice::operator()(const lock::Attempt& a) {
  if (a.outcome != lock::Attempt::Outcome::queued || a.holder.pid.empty() || a.lingering) return;
  std::string holder = a.holder.host + " " + a.holder.pid;
  if (holder == m_judged) return;
  m_judged = holder;
  lock::LockState state;
  try {
    state = m_backend.inspect(m_name, 0);
  } catch (const Error& e) {
    log::verbose("could not tell whether the holder of {} can be stopped ({})", m_name.key, e.what());
    return;
  }
  for (const lock::HolderState& h : state.holders) {
    if (h.holder.host != a.holder.host || h.holder.pid != a.holder.pid) continue;
    if (!h.preemptible && !h.lingering) {
      log::info(
          fmt::format("{}: the holder is not {} (started without {}); waiting for it", m_name.key, m_word, m_flag));
    }
    return;
  }
}

std::string acquired_text(const lock::LockName& name, const lock::Attempt& attempt, util::Millis ttl) {
  std::string waited = attempt.waited ? " after waiting " + util::format_duration(*attempt.waited) : "";
  return fmt::format("acquired {} (fence {}, ttl {}){}", name.key, attempt.fence, util::format_duration(ttl), waited);
}

std::string busy_outcome(const lock::LockName& name, const lock::Attempt& attempt, const TakeOptions& options) {
  if (!options.wait || options.wait->count() == 0)
    return fmt::format("{}; not waiting (-n)", busy_message(name, attempt));
  return fmt::format("{}; gave up after {} (--wait)", busy_message(name, attempt),
                     util::format_duration(*options.wait));
}

lock::Contender make_contender(const TakeOptions& options, const lock::Holder& holder) {
  lock::Contender c;
  c.token = lock::new_token();
  c.ttl = options.ttl;
  c.holder = holder;
  c.holder.note = at_most_bytes(options.note, k_record_text_max);
  c.limit = options.limit;
  c.mode = options.shared ? lock::Mode::shared : options.limit > 1 ? lock::Mode::semaphore : lock::Mode::exclusive;
  c.min_hold = options.min_hold;
  c.supersede = options.supersede;
  c.preempt = options.preempt;
  return c;
}

lock::WaitLimits wait_limits(const TakeOptions& options) {
  return {options.wait, options.wait_replicas, options.wait_timeout};
}

Progress progress_mode() {
  if (log::level() != log::Level::normal) return Progress::none;
  bool terminal = ::isatty(STDERR_FILENO) != 0;
  if (terminal && !dumb_terminal()) return Progress::line;
  if (terminal || in_ci()) return Progress::lines;
  return Progress::none;
}

WaitDisplay::WaitDisplay(const lock::LockName& name) : m_name(name), m_mode(progress_mode()) {}

WaitDisplay::~WaitDisplay() {
  if (m_shown) log::raw("\r\x1b[K");
}

util::Millis WaitDisplay::fresh_every() const {
  if (log::verbose_enabled()) return util::Millis(1);
  switch (m_mode) {
    case Progress::line: return std::chrono::seconds(5);
    case Progress::lines: return std::chrono::seconds(1);  // (its first line is due at 2s)
    case Progress::none: break;
  }
  return util::Millis(0);
}

util::Millis WaitDisplay::first_shown() const {
  return m_mode == Progress::none || log::verbose_enabled() ? util::Millis(0) : k_progress_after;
}

void WaitDisplay::operator()(const lock::Attempt& a, util::Millis waited) {
  if (!m_logged) {
    m_logged = true;
    log::verbose("waiting for {}: {}", m_name.key, a.lingering ? "it lingers (--min-hold)" : "held" + holder_text(a));
  }
  if (m_mode == Progress::none || waited < k_progress_after) return;
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(waited);
  std::string waited_text = secs.count() < 60 ? fmt::format("{}s", secs.count()) : util::format_duration(secs);
  // (On a terminal, the one line rewritten in place leaves out the job and the note: a line longer
  // than the terminal is wide could not be rewritten.)
  std::string text = fmt::format("waiting for {}: {}", m_name.key,
                                 a.lingering ? "lingering" : "held" + holder_text(a, m_mode != Progress::line));
  if (a.outcome == lock::Attempt::Outcome::queued) {
    text += fmt::format("; position {} of {}; waited {}", a.position, a.queue_length, waited_text);
  } else {
    text += fmt::format("; waited {}", waited_text);
  }
  // Every byte of the holder came from Redis: printable() escapes what could steer a terminal.
  if (m_mode == Progress::line) {
    log::raw(fmt::format("\r\x1b[Krlock: {}", util::printable(text)));
    m_shown = true;
    return;
  }
  auto now = util::BootClock::now();
  std::string holder = fmt::format("{}\n{}\n{}\n{}\n{}\n{}", a.lingering, a.holder.host, a.holder.pid, a.holder.cmd,
                                   a.holder.job, a.holder.note);
  // (A light step's view is the last full step's: a line is printed from a full step's.)
  if (a.light ||
      (m_printed_at && now < *m_printed_at + k_progress_every && holder == m_holder && a.position == m_position)) {
    return;
  }
  log::raw(fmt::format("rlock: {}\n", util::printable(text)));
  m_printed_at = now;
  m_holder = std::move(holder);
  m_position = a.position;
}

void WaitDisplay::done(const lock::Attempt& a) {
  if (m_mode == Progress::none || a.outcome != lock::Attempt::Outcome::acquired || !a.waited ||
      *a.waited < k_progress_after) {
    return;
  }
  if (m_shown) {
    log::raw("\r\x1b[K");
    m_shown = false;
  }
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(*a.waited);
  log::raw(fmt::format("rlock: got {} after {}\n", util::printable(m_name.key), util::format_duration(secs)));
}

std::string read_token(const TokenSource& source) {
  std::string token;
  if (!source.file.empty()) {
    try {
      token = std::string(util::trim(util::read_small_file(source.file, 4096)));
    } catch (const std::system_error& e) {
      throw Error(exit_code::k_data, fmt::format("cannot read token file {}: {}", source.file, e.code().message()));
    } catch (const std::length_error&) {
      throw Error(exit_code::k_data, fmt::format("token file {} is too large to be a token", source.file));
    }
    if (!plausible_token(token)) {
      throw Error(exit_code::k_data,
                  fmt::format("token file {} does not hold an rlock token (written by rlock acquire --token-file?)",
                              source.file));
    }
    return token;
  }
  const char* value = std::getenv(source.env.c_str());
  if (!value || !*value) {
    throw Error(exit_code::k_usage,
                fmt::format("no token: set {} to the token printed by rlock acquire, or use --token-file", source.env));
  }
  token = std::string(util::trim(value));
  if (!plausible_token(token)) {
    throw Error(exit_code::k_data, fmt::format("{} does not hold an rlock token", source.env));
  }
  return token;
}

}  // namespace rlock::commands
