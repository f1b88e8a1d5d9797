#include "ancestry.hpp"

#include "util/file.hpp"
#include "util/text.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <exception>

namespace rlock::proc {

namespace {

// The parent and start time of pid, from /proc/PID/stat.
struct StatLine {
  pid_t parent = 0;
  uint64_t start = 0;
  char state = '?';
};

std::optional<StatLine> read_stat(pid_t pid) {
  std::string text;
  try {
    text = util::read_small_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  // "pid (comm) state ppid ...": comm may hold spaces and ')', so fields count from the last ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string> fields = util::split(std::string_view(text).substr(close + 1), " \n");
  // fields[0] is field 3 (state): the parent is field 4, the start time field 22.
  if (fields.size() < 20) return std::nullopt;
  long long parent = 0, start = 0;
  if (!util::parse_int(fields[1], 0, INT32_MAX, parent) || !util::parse_int(fields[19], 0, INT64_MAX, start)) {
    return std::nullopt;
  }
  return StatLine{static_cast<pid_t>(parent), static_cast<uint64_t>(start), fields[0].empty() ? '?' : fields[0][0]};
}

}  // namespace

const std::string& boot_id() {
  static const std::string id = [] {
    try {
      return std::string(util::trim(util::read_small_file("/proc/sys/kernel/random/boot_id", 128)));
    } catch (const std::exception&) {
      return std::string();
    }
  }();
  return id;
}

std::optional<uint64_t> start_time(pid_t pid) {
  std::optional<StatLine> s = read_stat(pid);
  if (!s) return std::nullopt;
  return s->start;
}

pid_t parent_of(pid_t pid) {
  std::optional<StatLine> s = read_stat(pid);
  return s ? s->parent : 0;
}

namespace {

// What makes a process recognisable: its executable and arguments.
std::optional<std::string> identity(pid_t pid) {
  try {
    std::string exe = util::read_link("/proc/" + std::to_string(pid) + "/exe");
    return exe + '\0' + util::read_small_file("/proc/" + std::to_string(pid) + "/cmdline", 1 << 16);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

// Whether pid's stdout is a pipe whose other end `reader` holds: the subshell of a $(...),
// whose output its shell reads.
bool feeds(pid_t pid, pid_t reader) {
  std::string out;
  try {
    out = util::read_link("/proc/" + std::to_string(pid) + "/fd/1");
  } catch (const std::exception&) {
    return false;
  }
  if (out.rfind("pipe:", 0) != 0) return false;
  std::string dir = "/proc/" + std::to_string(reader) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    try {
      if (util::read_link(dir + "/" + e->d_name) == out) {
        found = true;
        break;
      }
    } catch (const std::exception&) {
    }
  }
  ::closedir(d);
  return found;
}

pid_t calling_process() {
  pid_t at = ::getppid();
  for (int depth = 0; depth < 16; ++depth) {
    pid_t above = parent_of(at);
    if (above <= 1) break;
    // A forked copy of its parent (same executable and arguments) whose output that parent reads:
    // the subshell of a $(...), which ends with this command. A shell the parent started for
    // another script (bash < inner.sh) is neither a copy that feeds it, and is kept.
    std::optional<std::string> mine = identity(at);
    if (!mine || mine != identity(above) || !feeds(at, above)) break;
    at = above;
  }
  return at;
}

bool process_alive(pid_t pid) {
  std::optional<StatLine> s = read_stat(pid);
  return s && s->state != 'Z' && s->state != 'X';
}

bool descends_from(pid_t pid, uint64_t start) {
  pid_t at = ::getppid();
  for (int depth = 0; depth < 4096 && at > 1; ++depth) {
    std::optional<StatLine> s = read_stat(at);
    if (!s) return false;
    if (at == pid) return s->start == start;
    at = s->parent;
  }
  return false;
}

std::vector<Process> descendants(pid_t root, size_t max, size_t& total) {
  total = 0;
  std::vector<std::pair<pid_t, pid_t>> parents;  // (pid, parent) of every process
  DIR* d = ::opendir("/proc");
  if (!d) return {};
  while (dirent* e = ::readdir(d)) {
    long long pid = 0;
    if (!util::parse_int(e->d_name, 1, INT32_MAX, pid)) continue;
    if (std::optional<StatLine> s = read_stat(static_cast<pid_t>(pid))) parents.emplace_back(pid, s->parent);
  }
  ::closedir(d);
  // Generation after generation: the tree is small, the host's process table may not be.
  std::vector<pid_t> found;
  std::vector<pid_t> generation{root};
  while (!generation.empty()) {
    std::vector<pid_t> next;
    for (auto [pid, parent] : parents) {
      if (std::find(generation.begin(), generation.end(), parent) != generation.end()) next.push_back(pid);
    }
    found.insert(found.end(), next.begin(), next.end());
    generation = std::move(next);
    if (found.size() > 100'000) break;  // a loop in what /proc said while it changed
  }
  std::sort(found.begin(), found.end());
  total = found.size();
  std::vector<Process> out;
  for (pid_t pid : found) {
    if (out.size() >= max) break;
    std::string base = "/proc/" + std::to_string(pid);
    std::string command;
    try {
      command = util::read_small_file(base + "/cmdline", 1 << 16);
    } catch (const std::exception&) {
    }
    while (!command.empty() && command.back() == '\0') command.pop_back();
    std::replace(command.begin(), command.end(), '\0', ' ');
    if (command.empty()) {
      try {
        command = "[" + std::string(util::trim(util::read_small_file(base + "/comm", 64))) + "]";
      } catch (const std::exception&) {
        command = "?";
      }
    }
    if (command.size() > 120) command = command.substr(0, 117) + "...";
    out.push_back({pid, std::move(command)});
  }
  return out;
}

}  // namespace rlock::proc
