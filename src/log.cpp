#include "log.hpp"

#include "util/fd.hpp"
#include "util/text.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>

namespace rlock::log {

namespace {

Level g_level = Level::normal;
bool g_syslog = false;         // every line goes to syslog (the keeper)
bool g_syslog_events = false;  // --syslog: events go to syslog too

// rlock's own syslog client. glibc's syslog(3) sends with a blocking send(2), which waits as long
// as the log daemon does not read: a datagram of ours is sent with MSG_DONTWAIT, and dropped then.
struct Syslog {
  util::Fd fd;
  size_t dropped = 0;
  bool warned = false;  // that syslog cannot be reached
};
Syslog g_syslog_socket;

void write_line(std::string_view prefix, std::string_view message);

// Connects to the socket syslogd or journald reads: /dev/log, or $RLOCK_SYSLOG_SOCKET. Tried again
// at the next line when it fails (a keeper outlives a restart of the log daemon).
void open_syslog() {
  const char* env = std::getenv("RLOCK_SYSLOG_SOCKET");
  std::string path = env && *env ? env : "/dev/log";
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  int err = ENAMETOOLONG;
  if (path.size() < sizeof address.sun_path) {
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    util::Fd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.valid() && ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
      g_syslog_socket.fd = std::move(fd);
      return;
    }
    err = errno;
  }
  // Said once, on stderr (unless syslog is where every line goes), as a warning: not with -q,
  // where it would be one cron mail per host and run.
  if (!g_syslog_socket.warned && !g_syslog && g_level != Level::quiet) {
    g_syslog_socket.warned = true;
    write_line("rlock: warning: ",
               fmt::format("--syslog: cannot reach syslog at {}: {}; events are not logged", path, std::strerror(err)));
  }
}

// Sends "<PRI>Mmm dd hh:mm:ss rlock[PID]: MESSAGE", as syslog(3) would, facility user.
void send_syslog(Severity severity, std::string_view message) {
  if (!g_syslog_socket.fd.valid()) open_syslog();
  if (!g_syslog_socket.fd.valid()) {
    ++g_syslog_socket.dropped;
    return;
  }
  static constexpr const char* k_months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                             "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  time_t now = ::time(nullptr);
  tm local{};
  localtime_r(&now, &local);
  std::string line =
      fmt::format("<{}>{} {:2} {:02}:{:02}:{:02} rlock[{}]: {}", 8 + static_cast<int>(severity), k_months[local.tm_mon],
                  local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec, ::getpid(), util::printable(message));
  if (g_syslog_socket.dropped > 0) {
    line += fmt::format(" ({} earlier lines could not be sent to syslog)", g_syslog_socket.dropped);
  }
  for (;;) {
    if (::send(g_syslog_socket.fd.get(), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
      g_syslog_socket.dropped = 0;
      return;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;  // the log daemon is behind: the line is lost
    if (errno != EINTR) {
      g_syslog_socket.fd.reset();  // the daemon restarted (ECONNREFUSED...): connect again next time
      break;
    }
  }
  ++g_syslog_socket.dropped;
}

// Non-blocking mode (set_nonblocking).
struct Queue {
  bool enabled = false;
  bool opened = false;     // the description below is set up at the first write
  int fd = STDERR_FILENO;  // where lines go: a description of stderr's own, or stderr itself
  util::Fd own;            // owns fd when it is a description of our own
  bool socket = false;     // stderr is a socket: send(MSG_DONTWAIT) on it
  bool guarded = false;    // no description of our own: poll before each write (best effort)
  bool broken = false;     // stderr is gone (EPIPE...): nothing more is written
  std::deque<std::string> lines;
  size_t bytes = 0;
  size_t dropped = 0;
};

Queue g_queue;
constexpr size_t k_queue_limit = size_t{64} * 1024;

void write_blocking(const std::string& line) {
  // One write per line, so lines from concurrent rlock processes do not interleave.
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    left -= static_cast<size_t>(n);
  }
}

// Writes one line without blocking: the bytes written (all of them, for a line of at most
// PIPE_BUF to a pipe), or -1 with errno.
ssize_t write_now(const std::string& line) {
  if (g_queue.socket) return ::send(g_queue.fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (g_queue.guarded) {
    pollfd p{g_queue.fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)) {
      errno = EAGAIN;
      return -1;
    }
  }
  return ::write(g_queue.fd, line.data(), line.size());
}

void open_queue();

void enqueue(std::string line) {
  if (!g_queue.opened) open_queue();
  if (g_queue.broken) return;
  if (g_queue.bytes + line.size() > k_queue_limit) {
    ++g_queue.dropped;
    return;
  }
  g_queue.bytes += line.size();
  g_queue.lines.push_back(std::move(line));
  drain();
}

// Every message may quote what a server or another holder wrote: it is made printable first, so
// no escape sequence or line break of theirs reaches the terminal.
void write_line(std::string_view prefix, std::string_view message) {
  std::string line(prefix);
  line += util::printable(message);
  if (g_syslog) {
    send_syslog(prefix.find("error") != std::string_view::npos ? Severity::err : Severity::notice, line);
    return;
  }
  line += '\n';
  if (g_queue.enabled) {
    enqueue(std::move(line));
  } else {
    write_blocking(line);
  }
}

}  // namespace

void set_level(Level level) { g_level = level; }

void use_syslog() { g_syslog = true; }

void enable_syslog_events() { g_syslog_events = true; }

bool syslog_events_enabled() { return g_syslog_events; }

void event_line(Severity severity, std::string_view message) {
  if (g_syslog_events) send_syslog(severity, message);
}

void raw(std::string_view text) {
  if (g_queue.enabled) {
    enqueue(std::string(text));
  } else {
    write_blocking(std::string(text));
  }
}

Level level() { return g_level; }

void error(std::string_view message) { write_line("rlock: error: ", message); }

void warning(std::string_view message) {
  if (g_level != Level::quiet) {
    write_line("rlock: warning: ", message);
  }
}

void info(std::string_view message) {
  if (g_level != Level::quiet) {
    write_line("rlock: ", message);
  }
}

void verbose_line(std::string_view message) {
  // In UTC with a Z, as every time rlock prints (status, log, the messages).
  timeval now{};
  gettimeofday(&now, nullptr);
  tm utc{};
  gmtime_r(&now.tv_sec, &utc);
  write_line(fmt::format("rlock: {:02}:{:02}:{:02}.{:03}Z ", utc.tm_hour, utc.tm_min, utc.tm_sec, now.tv_usec / 1000),
             message);
}

void set_nonblocking() { g_queue.enabled = true; }

namespace {

// Sets up where non-blocking lines go, at the first one: a run that prints nothing pays nothing.
void open_queue() {
  g_queue.opened = true;
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) {
    g_queue.broken = true;
    return;
  }
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return;  // a file: a write never waits for a reader
  if (S_ISSOCK(st.st_mode)) {
    g_queue.socket = true;
    return;
  }
  // A pipe, FIFO or terminal: O_NONBLOCK on stderr itself would change it for the child too
  // (the flag belongs to the open file description), so open a description of our own.
  g_queue.own.reset(::open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (g_queue.own.valid()) {
    g_queue.fd = g_queue.own.get();
  } else {
    g_queue.guarded = true;
  }
}

}  // namespace

int pending_fd() { return g_queue.enabled && !g_queue.broken && !g_queue.lines.empty() ? g_queue.fd : -1; }

void drain() {
  while (!g_queue.lines.empty() && !g_queue.broken) {
    std::string& line = g_queue.lines.front();
    ssize_t n = write_now(line);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      g_queue.broken = true;  // EPIPE, EIO...: stderr is gone
      break;
    }
    g_queue.bytes -= static_cast<size_t>(n);
    if (static_cast<size_t>(n) < line.size()) {
      line.erase(0, static_cast<size_t>(n));
      continue;
    }
    g_queue.lines.pop_front();
    if (g_queue.lines.empty() && g_queue.dropped > 0) {
      std::string note =
          fmt::format("rlock: warning: {} lines of output were dropped: stderr was not being read\n", g_queue.dropped);
      g_queue.dropped = 0;
      g_queue.bytes += note.size();
      g_queue.lines.push_back(std::move(note));
    }
  }
  if (g_queue.broken) {
    g_queue.lines.clear();
    g_queue.bytes = 0;
  }
}

void flush(util::BootClock::time_point deadline) {
  drain();
  while (pending_fd() >= 0) {
    pollfd p{g_queue.fd, POLLOUT, 0};
    if (g_queue.guarded) p.events = POLLOUT;
    if (util::poll_until(&p, 1, deadline) <= 0) break;
    drain();
  }
  g_queue.lines.clear();
  g_queue.bytes = 0;
}

}  // namespace rlock::log
