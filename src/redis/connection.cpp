#include "connection.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rlock::redis {

namespace {

Reply convert(const redisReply& r) {
  Reply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::string;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::status;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::error;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::integer;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::array;
      out.elements.reserve(r.elements);
      for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(convert(*r.element[i]));
      break;
    default:
      out.type = Reply::Type::nil;
  }
  return out;
}

std::string format_command(const Command& argv) {
  std::vector<const char*> args;
  std::vector<size_t> lengths;
  args.reserve(argv.size());
  lengths.reserve(argv.size());
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lengths.push_back(a.size());
  }
  char* out = nullptr;
  int n = redisFormatCommandArgv(&out, static_cast<int>(args.size()), args.data(), lengths.data());
  if (n < 0) throw Error(exit_code::k_internal, "out of memory formatting a Redis command");
  std::string command(out, static_cast<size_t>(n));
  redisFreeCommand(out);
  return command;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));  // poll again after a minute at most
}

}  // namespace

std::string Reply::error_code() const {
  if (type != Type::error) return {};
  return str.substr(0, str.find(' '));
}

Connection::Connection(Endpoint endpoint, Timeouts timeouts, TlsOptions tls)
    : m_endpoint(std::move(endpoint)),
      m_timeouts(timeouts),
      m_tls_options(std::move(tls)),
      m_reader(nullptr, redisReaderFree) {}

Connection::~Connection() = default;

void Connection::set_interrupt(int fd, std::function<void()> on_ready) {
  m_interrupt_fd = fd;
  m_on_interrupt = std::move(on_ready);
}

void Connection::close() {
  m_tls.reset();
  m_socket.reset();
  m_reader.reset();
}

void Connection::fail(const std::string& why) {
  close();
  throw Error(exit_code::k_unavailable, fmt::format("{}: {}", m_endpoint.display(), why));
}

void Connection::wait_for(short events, Clock::time_point deadline, std::string_view what) {
  for (;;) {
    pollfd fds[2] = {{m_socket.get(), events, 0}, {m_interrupt_fd, POLLIN, 0}};
    nfds_t count = m_interrupt_fd >= 0 ? 2 : 1;
    int n = ::poll(fds, count, remaining_ms(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(fmt::format("poll: {}", std::strerror(errno)));
    }
    if (count == 2 && (fds[1].revents & POLLIN)) m_on_interrupt();
    if (fds[0].revents != 0) return;
    if (Clock::now() >= deadline) fail(std::string(what));
  }
}

void Connection::connect_socket(Clock::time_point deadline) {
  std::string timeout_text =
      fmt::format("could not connect within {} (--connect-timeout)", util::format_duration(m_timeouts.connect));
  if (m_endpoint.kind == Endpoint::Kind::unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (m_endpoint.path.size() >= sizeof addr.sun_path) {
      throw Error(exit_code::k_config, fmt::format("{}: socket path too long", m_endpoint.display()));
    }
    std::memcpy(addr.sun_path, m_endpoint.path.c_str(), m_endpoint.path.size() + 1);
    m_socket.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!m_socket.valid()) fail(fmt::format("socket: {}", std::strerror(errno)));
    if (::connect(m_socket.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno != EINPROGRESS) fail(fmt::format("cannot connect: {}", std::strerror(errno)));
      wait_for(POLLOUT, deadline, timeout_text);
    }
    return;
  }

  if (m_addresses.empty()) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    std::string port = std::to_string(m_endpoint.port);
    int rc = ::getaddrinfo(m_endpoint.host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) fail(fmt::format("cannot resolve '{}': {}", m_endpoint.host, gai_strerror(rc)));
    for (addrinfo* ai = found; ai; ai = ai->ai_next) {
      const char* bytes = reinterpret_cast<const char*>(ai->ai_addr);
      m_addresses.emplace_back(bytes, bytes + ai->ai_addrlen);
      m_families.push_back(ai->ai_family);
    }
    freeaddrinfo(found);
  }

  std::string last_error = "no address";
  for (size_t i = 0; i < m_addresses.size(); ++i) {
    const auto* addr = reinterpret_cast<const sockaddr*>(m_addresses[i].data());
    auto addr_len = static_cast<socklen_t>(m_addresses[i].size());
    m_socket.reset(::socket(m_families[i], SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!m_socket.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(m_socket.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(m_socket.get(), addr, addr_len) == 0) return;
    if (errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      continue;
    }
    wait_for(POLLOUT, deadline, timeout_text);
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(m_socket.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) return;
    last_error = std::strerror(err);
  }
  fail(fmt::format("cannot connect: {}", last_error));
}

void Connection::connect() {
  auto deadline = capped(Clock::now() + m_timeouts.connect);
  connect_socket(deadline);
  if (m_endpoint.tls) {
    std::string what = fmt::format("TLS handshake not done within {} (--connect-timeout)",
                                   util::format_duration(m_timeouts.connect));
    try {
      m_tls = std::make_unique<TlsSession>(m_socket.get(), m_endpoint.host, m_tls_options, m_endpoint.display(),
                                           [&](short events) { wait_for(events, deadline, what); });
    } catch (const Error&) {
      close();
      throw;
    }
  }
  m_reader.reset(redisReaderCreate());
  if (!m_reader) throw Error(exit_code::k_internal, "out of memory creating a RESP reader");

  std::vector<Command> hello;
  if (!m_endpoint.password.empty()) {
    if (m_endpoint.user.empty()) {
      hello.push_back({"AUTH", m_endpoint.password});
    } else {
      hello.push_back({"AUTH", m_endpoint.user, m_endpoint.password});
    }
  }
  if (m_endpoint.db != 0) hello.push_back({"SELECT", std::to_string(m_endpoint.db)});
  if (hello.empty()) return;
  std::vector<Reply> replies = exchange(hello, false);
  for (size_t i = 0; i < replies.size(); ++i) {
    const Reply& r = replies[i];
    if (!r.is_error()) continue;
    std::string what = hello[i][0];
    if (what == "AUTH" && r.str.find("without any password configured") != std::string::npos) {
      // REDISCLI_AUTH exported for another server: redis-cli only warns here too.
      log::warning(fmt::format("{} needs no password; ignoring the one given", m_endpoint.display()));
      continue;
    }
    close();
    if (what == "AUTH") {
      throw Error(exit_code::k_permission,
                  fmt::format("{}: authentication failed: {}", m_endpoint.display(), r.str));
    }
    throw Error(r.error_code() == "NOAUTH" || r.error_code() == "NOPERM" ? exit_code::k_permission
                                                                          : exit_code::k_config,
                fmt::format("{}: cannot select database {}: {}", m_endpoint.display(), m_endpoint.db, r.str));
  }
}

void Connection::write_all(const std::string& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    short want = POLLOUT;
    ssize_t n = m_tls ? m_tls->write(data.data() + done, data.size() - done, &want)
                      : ::send(m_socket.get(), data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (m_tls && n < 0) {
      wait_for(want, deadline,
               fmt::format("could not send within {} (--timeout)", util::format_duration(m_timeouts.command)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_for(POLLOUT, deadline,
               fmt::format("could not send within {} (--timeout)", util::format_duration(m_timeouts.command)));
      continue;
    }
    fail(fmt::format("connection lost: {}", std::strerror(errno)));
  }
}

Reply Connection::read_reply(Clock::time_point deadline) {
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(m_reader.get(), &raw) != REDIS_OK) fail("protocol error in the server's reply");
    if (raw) {
      Reply reply = convert(*static_cast<redisReply*>(raw));
      freeReplyObject(raw);
      return reply;
    }
    char buffer[16384];
    short want = POLLIN;
    ssize_t n = m_tls ? m_tls->read(buffer, sizeof buffer, &want) : ::recv(m_socket.get(), buffer, sizeof buffer, 0);
    if (n > 0) {
      redisReaderFeed(m_reader.get(), buffer, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) fail("connection closed by the server");
    if (m_tls) {
      wait_for(want, deadline,
               fmt::format("no reply within {} (--timeout)", util::format_duration(m_timeouts.command)));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) fail(fmt::format("connection lost: {}", std::strerror(errno)));
    wait_for(POLLIN, deadline,
             fmt::format("no reply within {} (--timeout)", util::format_duration(m_timeouts.command)));
  }
}

std::vector<Reply> Connection::exchange(const std::vector<Command>& commands, bool check_auth, util::Millis budget) {
  try {
    return exchange_once(commands, check_auth, budget);
  } catch (const Error& e) {
    // A failure mid-exchange leaves the stream out of step: start afresh next time.
    if (e.exit_code() == exit_code::k_unavailable) close();
    throw;
  }
}

std::vector<Reply> Connection::exchange_once(const std::vector<Command>& commands, bool check_auth,
                                             util::Millis budget) {
  std::string wire;
  for (const Command& c : commands) wire += format_command(c);
  auto deadline = capped(Clock::now() + m_timeouts.command + budget);
  write_all(wire, deadline);
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) replies.push_back(read_reply(deadline));
  if (check_auth) {
    for (const Reply& r : replies) {
      std::string code = r.error_code();
      // Redis 7 refuses long commands from a client that has not logged in with a protocol
      // error rather than NOAUTH: both mean the password is missing.
      if (code == "NOAUTH" || r.str.find("unauthenticated") != std::string::npos) {
        throw Error(exit_code::k_permission,
                    fmt::format("{}: the server requires a password (put it in the URL, RLOCK_PASSWORD or "
                                "REDISCLI_AUTH)",
                                m_endpoint.display()));
      }
      if (code == "NOPERM") {
        throw Error(exit_code::k_permission,
                    fmt::format("{}: permission denied: {}", m_endpoint.display(), r.str));
      }
    }
  }
  return replies;
}

std::vector<Reply> Connection::pipeline(const std::vector<Command>& commands) {
  if (!m_socket.valid()) connect();
  return exchange(commands, true);
}

Reply Connection::call(const Command& argv) { return std::move(pipeline({argv}).front()); }

Reply Connection::call_blocking(const Command& argv, util::Millis budget) {
  if (!m_socket.valid()) connect();
  return std::move(exchange({argv}, true, budget).front());
}

}  // namespace rlock::redis
