#include "keeper.hpp"

#include "lock/backend.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "lock/lease.hpp"
#include "lock/schedule.hpp"
#include "log.hpp"
#include "proc/ancestry.hpp"
#include "proc/signals.hpp"
#include "redis/client.hpp"
#include "util/file.hpp"
#include "util/text.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <pwd.h>
#include <exception>
#include <map>

namespace rlock::commands::keeper {

namespace {

using Clock = util::BootClock;
using util::Millis;

int64_t wall_ms() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<int64_t>(tv.tv_sec) * 1000 + tv.tv_usec / 1000;
}

// The state directories to look in, the preferred one first: the session's runtime directory,
// then /tmp/rlock-UID (cron sets no XDG_RUNTIME_DIR), then one in the home directory, which no
// other user can create first (another user may squat /tmp/rlock-UID: then it is skipped).
std::vector<std::string> candidate_dirs() {
  std::vector<std::string> dirs;
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg && *xdg == '/') dirs.push_back(std::string(xdg) + "/rlock");
  dirs.push_back(fmt::format("/tmp/rlock-{}", ::getuid()));
  std::string home;
  if (const char* h = std::getenv("HOME"); h && *h == '/') {
    home = h;
  } else if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir && *pw->pw_dir == '/') {
    home = pw->pw_dir;
  }
  if (!home.empty()) dirs.push_back(home + "/.rlock");
  return dirs;
}

// Whether dir is a directory of ours that nobody else may use; why not, in *why.
bool safe_dir(const std::string& dir, std::string* why) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (why) *why = std::strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (why) *why = "not a directory";
  } else if (st.st_uid != ::getuid()) {
    if (why) *why = "owned by another user";
  } else if ((st.st_mode & 077) != 0) {
    if (why) *why = "others may use it (mode is not 0700)";
  } else {
    return true;
  }
  return false;
}

std::string state_file(const std::string& dir, const std::string& id) { return dir + "/" + id + ".keeper"; }

bool valid_id(const std::string& id) {
  return id.size() == 16 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string format_state(const State& s) {
  std::string out;
  auto put = [&out](const char* name, const std::string& value) {
    out += fmt::format("{}={}\n", name, util::percent_encode(value));
  };
  put("lock", s.lock_key);
  put("token", s.token);
  put("boot", s.boot_id);
  put("keeper", std::to_string(s.keeper));
  put("keeper_start", std::to_string(s.keeper_start));
  put("watched", std::to_string(s.watched));
  put("watched_start", std::to_string(s.watched_start));
  put("status", s.status);
  put("reason", s.reason);
  put("when", std::to_string(s.when_ms));
  return out;
}

std::optional<State> parse_state(const std::string& text) {
  std::map<std::string, std::string> v;
  for (const std::string& line : util::split(text, "\n")) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string value;
    if (!util::percent_decode(std::string_view(line).substr(eq + 1), value)) return std::nullopt;
    v[line.substr(0, eq)] = value;
  }
  long long keeper = 0, keeper_start = 0, watched = 0, watched_start = 0, when = 0;
  if (!util::parse_int(v["keeper"], 1, INT32_MAX, keeper) ||
      !util::parse_int(v["keeper_start"], 0, INT64_MAX, keeper_start) ||
      !util::parse_int(v["watched"], 1, INT32_MAX, watched) ||
      !util::parse_int(v["watched_start"], 0, INT64_MAX, watched_start) ||
      !util::parse_int(v["when"], 0, INT64_MAX, when)) {
    return std::nullopt;
  }
  State s;
  s.lock_key = v["lock"];
  s.token = v["token"];
  s.boot_id = v["boot"];
  s.keeper = static_cast<pid_t>(keeper);
  s.keeper_start = static_cast<uint64_t>(keeper_start);
  s.watched = static_cast<pid_t>(watched);
  s.watched_start = static_cast<uint64_t>(watched_start);
  s.status = v["status"];
  s.reason = v["reason"];
  s.when_ms = when;
  return s;
}

// Where the state of id is, among the directories, if anywhere.
std::optional<std::string> find_state(const std::string& id) {
  if (!valid_id(id)) return std::nullopt;
  for (const std::string& dir : candidate_dirs()) {
    if (!safe_dir(dir, nullptr)) continue;
    std::string path = state_file(dir, id);
    if (::access(path.c_str(), F_OK) == 0) return path;
  }
  return std::nullopt;
}

std::optional<State> read_path(const std::string& path) {
  try {
    return parse_state(util::read_small_file(path, 16384));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool keeper_alive(const State& s) {
  return s.boot_id == proc::boot_id() && proc::start_time(s.keeper) == s.keeper_start && proc::process_alive(s.keeper);
}

// The keeper's side: the hold of one lock, for as long as the watched process lives.
class Keeper {
public:
  Keeper(const Spec& spec, proc::Watched& watched, std::string state_path)
      : m_spec(spec),
        m_watched(watched),
        m_state_path(std::move(state_path)),
        m_signals({SIGTERM, SIGINT, SIGHUP}, {SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU}),
        m_backend(lock::open_backend(spec.connect, spec.ttl)),
        m_schedule(spec.sent_at, spec.ttl, Millis(0), spec.connect.timeouts.command) {
    m_state.lock_key = spec.name.lock_key();
    m_state.token = spec.token;
    m_state.boot_id = proc::boot_id();
    m_state.keeper = ::getpid();
    m_state.keeper_start = proc::start_time(::getpid()).value_or(0);
    m_state.watched = watched.pid();
    m_state.watched_start = watched.start();
    if (spec.max_hold) m_max_hold_at = spec.sent_at + *spec.max_hold;
  }

  // Renews once (recording the keeper with the hold) and says so on armed; then keeps the lock.
  int run(int armed);

private:
  void save(const std::string& status, const std::string& reason);
  bool renew();
  int lose(const std::string& reason);
  void release_leftovers();
  int give_back(bool requested);

  const Spec& m_spec;
  proc::Watched& m_watched;
  std::string m_state_path;
  State m_state;
  proc::SignalSet m_signals;
  std::unique_ptr<lock::Backend> m_backend;
  lock::Schedule m_schedule;
  std::optional<Clock::time_point> m_max_hold_at;
};

void Keeper::save(const std::string& status, const std::string& reason) {
  m_state.status = status;
  m_state.reason = reason;
  m_state.when_ms = wall_ms();
  try {
    util::write_file_atomic(m_state_path, format_state(m_state), 0600);
  } catch (const std::exception& e) {
    log::warning(fmt::format("cannot write the keeper state {}: {}", m_state_path, e.what()));
  }
}

// One renewal within its budget: true when the lock is still ours (or may be: an error is
// retried), false when it is lost.
bool Keeper::renew() {
  auto now = Clock::now();
  m_backend->cap_waits(now + m_schedule.attempt_budget(now));
  try {
    bool confirmed = m_backend->confirm_master();
    auto sent_at = Clock::now();
    std::optional<lock::Extension> e = m_backend->extend(m_spec.name, m_spec.token, m_spec.ttl, m_spec.ttl,
                                                         m_spec.fence, lock::KeeperInfo{::getpid(), m_watched.pid()});
    m_backend->cap_waits(std::nullopt);
    if (!e) return false;
    if (confirmed) {
      m_schedule.renewed(sent_at);
      log::verbose("renewed {} for {}", m_spec.name.key, util::format_duration(e->ttl));
    } else {
      m_schedule.failed(Clock::now());
    }
  } catch (const Error& err) {
    m_backend->cap_waits(std::nullopt);
    m_schedule.failed(Clock::now());
    log::verbose("renewal failed ({}); retrying", err.what());
  }
  return true;
}

// Lost on a majority, the token may still hold the lock on a quorum's other masters: give it back
// there rather than leave it until its TTL. The scripts compare the token, so nobody else's lock
// is touched; an error leaves the rest to expire.
void Keeper::release_leftovers() {
  m_backend->cap_waits(Clock::now() + m_spec.connect.timeouts.command);
  try {
    m_backend->release(m_spec.name, m_spec.token, lock::Ending{"", m_spec.holder, m_spec.fence});
  } catch (const Error&) {
  }
}

int Keeper::lose(const std::string& reason) {
  log::error(fmt::format("lost the lock {}: {}", m_spec.name.key, reason));
  log::event(log::Severity::err, "lost {} (kept alive for pid {}): {}", m_spec.name.key, m_watched.pid(), reason);
  save("lost", reason);
  // Never taken again: the process that relied on it is told, if it asked to be.
  if (m_spec.signal > 0 && !m_watched.ended()) ::kill(m_watched.pid(), m_spec.signal);
  return exit_code::k_lost;
}

int Keeper::give_back(bool requested) {
  m_backend->cap_waits(Clock::now() + m_spec.connect.timeouts.command);
  bool released = false;
  try {
    // Not known lost unless a majority says so: an unknown end lapses on its own.
    released = m_backend->release(m_spec.name, m_spec.token, lock::Ending{"", m_spec.holder, m_spec.fence}) !=
               lock::Released::not_held;
  } catch (const Error& e) {
    log::warning(fmt::format("could not release {} ({}); it expires within {}", m_spec.name.key, e.what(),
                             util::format_duration(m_spec.ttl)));
    released = true;  // not known lost: it lapses on its own
  }
  if (!released) return lose("the lock expired or was taken over before it was released");
  log::verbose("released {}", m_spec.name.key);
  if (!requested) {
    log::event(log::Severity::info, "released {}: pid {}, which it was kept for, ended", m_spec.name.key,
               m_watched.pid());
  }
  if (requested) {
    save("released", "");  // release reads it, then removes it
  } else {
    ::unlink(m_state_path.c_str());  // the watched process ended: nobody will ask
  }
  return exit_code::k_ok;
}

int Keeper::run(int armed) {
  save("running", "");
  // The first renewal records the keeper with the hold and proves the connection.
  bool ok = false;
  std::string why = "the lock was lost before the keeper could renew it";
  try {
    auto sent_at = Clock::now();
    ok = m_backend
             ->extend(m_spec.name, m_spec.token, m_spec.ttl, m_spec.ttl, m_spec.fence,
                      lock::KeeperInfo{::getpid(), m_watched.pid()})
             .has_value();
    if (ok) m_schedule.renewed(sent_at);
  } catch (const Error& e) {
    why = e.what();
  }
  std::string message = ok ? "A" : "F" + why;
  [[maybe_unused]] ssize_t n = ::write(armed, message.data(), message.size());
  ::close(armed);
  if (!ok) {
    ::unlink(m_state_path.c_str());
    return exit_code::k_unavailable;
  }
  log::verbose("keeping {} for pid {}", m_spec.name.key, m_watched.pid());

  for (;;) {
    std::optional<Clock::time_point> wake = std::min(m_schedule.next_renewal(), m_schedule.stop_at());
    if (m_max_hold_at) wake = std::min(*wake, *m_max_hold_at);
    if (m_watched.fd() < 0) wake = std::min(*wake, Clock::now() + Millis(proc::Watched::k_poll_interval_ms));
    pollfd fds[2] = {{m_signals.fd(), POLLIN, 0}, {m_watched.fd(), POLLIN, 0}};
    util::poll_until(fds, m_watched.fd() >= 0 ? 2 : 1, wake);
    if (!m_signals.take().empty()) {
      log::verbose("asked to release {}", m_spec.name.key);
      return give_back(true);
    }
    if (m_watched.ended()) {
      log::verbose("process {} ended: releasing {}", m_watched.pid(), m_spec.name.key);
      return give_back(false);
    }
    auto now = Clock::now();
    if (m_max_hold_at && now >= *m_max_hold_at) {
      give_back(false);
      return lose(fmt::format("given up after --max-hold {}", util::format_duration(*m_spec.max_hold)));
    }
    if (now >= m_schedule.stop_at()) {
      release_leftovers();
      return lose("renewals kept failing until the lease's deadline");
    }
    if (now >= m_schedule.next_renewal() && !renew()) {
      release_leftovers();
      return lose("the lock expired or was taken over (its token no longer owns it)");
    }
  }
}

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
  int code = exit_code::k_internal;
  try {
    Keeper keeper(spec, watched, path);
    code = keeper.run(armed);
  } catch (const std::exception& e) {
    log::error(e.what());
  }
  ::_exit(code);
}

}  // namespace

std::string state_dir(bool create) {
  std::vector<std::string> dirs = candidate_dirs();
  std::vector<std::string> refused;
  for (const std::string& dir : dirs) {
    if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      refused.push_back(fmt::format("{}: {}", dir, std::strerror(errno)));
      continue;
    }
    std::string why;
    if (safe_dir(dir, &why)) return dir;
    if (create) refused.push_back(fmt::format("{}: {}", dir, why));
  }
  if (!create) return {};
  throw Error(exit_code::k_system,
              fmt::format("no keeper state directory is safe to use ({})", fmt::join(refused, "; ")));
}

std::optional<State> read_state(const std::string& id) {
  std::optional<std::string> path = find_state(id);
  if (!path) return std::nullopt;
  return read_path(*path);
}

void remove_state(const std::string& id) {
  if (std::optional<std::string> path = find_state(id)) ::unlink(path->c_str());
}

std::vector<lock::Hold> enclosing_holds() {
  std::vector<lock::Hold> holds;
  for (const std::string& dir : candidate_dirs()) {
    if (!safe_dir(dir, nullptr)) continue;
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() != 23 || name.substr(16) != ".keeper") continue;
      std::optional<State> s = read_path(dir + "/" + name);
      if (!s || s->status != "running" || !keeper_alive(*s) || !proc::descends_from(s->watched, s->watched_start)) {
        continue;
      }
      holds.push_back({s->lock_key, s->token, 0, s->boot_id, s->watched, s->watched_start});
    }
    ::closedir(d);
  }
  return holds;
}

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

std::optional<Ending> stop(const std::string& token, Millis wait) {
  std::string id = lock::id_of(token);
  std::optional<std::string> path = find_state(id);
  if (!path) return std::nullopt;
  std::optional<State> s = read_path(*path);
  if (!s || s->token != token) return std::nullopt;
  if (s->status == "running") {
    if (!keeper_alive(*s)) {
      ::unlink(path->c_str());  // it died without a word: the caller releases as usual
      return std::nullopt;
    }
    // The keeper gives the lock back itself, so that it never renews a released lock.
    ::kill(s->keeper, SIGTERM);
    auto until = Clock::now() + wait;
    while (Clock::now() < until && proc::process_alive(s->keeper) && proc::start_time(s->keeper) == s->keeper_start) {
      util::poll_until(nullptr, 0, Clock::now() + Millis(5));
    }
    s = read_path(*path);
    if (!s || s->status == "running") {
      ::unlink(path->c_str());
      return std::nullopt;
    }
  }
  ::unlink(path->c_str());
  Ending e;
  e.released = s->status == "released";
  e.lost = s->status == "lost";
  e.reason = s->reason;
  e.when_ms = s->when_ms;
  return e;
}

std::optional<Ending> recorded_loss(const std::string& token) {
  std::string id = lock::id_of(token);
  std::optional<std::string> path = find_state(id);
  if (!path) return std::nullopt;
  std::optional<State> s = read_path(*path);
  if (!s || s->token != token || s->status != "lost") return std::nullopt;
  ::unlink(path->c_str());
  Ending e;
  e.lost = true;
  e.reason = s->reason;
  e.when_ms = s->when_ms;
  return e;
}

}  // namespace rlock::commands::keeper
