#include "commands/keeper_parts.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "proc/ancestry.hpp"
#include "util/clock.hpp"
#include "util/file.hpp"
#include "util/text.hpp"

#include <dirent.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>

namespace rlock::commands::keeper {

namespace detail {

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

}  // namespace detail

using namespace detail;
using util::Millis;
namespace {
using Clock = util::BootClock;
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
