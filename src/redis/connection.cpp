#include "connection.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "util/text.hpp"

#include <hiredis/hiredis.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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
    default: out.type = Reply::Type::nil;
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

std::string format_all(const std::vector<Command>& commands) {
  std::string wire;
  for (const Command& c : commands) wire += format_command(c);
  return wire;
}

}  // namespace

std::string Reply::error_code() const {
  if (type != Type::error) return {};
  return str.substr(0, str.find(' '));
}

std::string Reply::text() const {
  if (type == Type::string || type == Type::status) return str;
  if (type == Type::integer) return std::to_string(integer);
  return {};
}

int64_t Reply::number() const {
  if (type == Type::integer) return integer;
  long long v = 0;
  return util::parse_int(str, INT64_MIN, INT64_MAX, v) && (type == Type::string || type == Type::status) ? v : 0;
}

Connection::Connection(Endpoint endpoint, Timeouts timeouts, TlsOptions tls)
    : m_endpoint(std::move(endpoint)),
      m_timeouts(timeouts),
      m_tls_options(std::move(tls)),
      m_reader(nullptr, redisReaderFree) {}

Connection::~Connection() = default;

void Connection::set_interrupt(int fd, std::function<bool()> on_ready) {
  m_interrupt_fd = fd;
  m_on_interrupt = std::move(on_ready);
}

void Connection::close() {
  m_tls.reset();
  m_socket.reset();
  m_reader.reset();
  if (m_state != State::failed) m_state = State::idle;
}

void Connection::fail(int code, const std::string& why) {
  throw Error(code, fmt::format("{}: {}", m_endpoint.display(), why));
}

std::string Connection::timeout_message() const {
  switch (m_state) {
    case State::resolving:
      return fmt::format("could not resolve '{}' within {} (--connect-timeout)", m_endpoint.host,
                         util::format_duration(m_timeouts.connect));
    case State::connecting:
      return fmt::format("could not connect within {} (--connect-timeout)", util::format_duration(m_timeouts.connect));
    case State::handshaking:
      return fmt::format("TLS handshake not done within {} (--connect-timeout)",
                         util::format_duration(m_timeouts.connect));
    case State::sending:
      return fmt::format("could not send within {} (--io-timeout)", util::format_duration(m_timeouts.command));
    default:
      return fmt::format("no reply within {} (--io-timeout)", util::format_duration(m_timeouts.command + m_budget));
  }
}

void Connection::start(const std::vector<Command>& commands, util::Millis budget, const UndoCommands& undo) {
  if (!finished()) throw Error(exit_code::k_internal, "a Redis exchange was started before the last one ended");
  m_state = State::idle;
  m_error.reset();
  m_replies.clear();
  m_replies.reserve(commands.size());
  m_reply_bytes = 0;
  m_budget = budget;
  m_request_sent = false;
  m_received = 0;
  m_hello_names.clear();
  m_wire.clear();
  if (m_socket.valid() && peer_hung_up()) {
    // The server closed this idle connection (it restarted, or dropped idle clients): a request
    // written there would only fail. Reconnect instead, before anything is sent.
    log::verbose("{}: the server closed the connection; reconnecting", m_endpoint.display());
    close();
  }
  bool fresh = !m_socket.valid();
  if (fresh) {
    // AUTH and SELECT go out in the same write as the commands: no round trip of their own.
    std::vector<Command> hello;
    if (!m_endpoint.password.empty()) {
      if (m_endpoint.user.empty()) {
        hello.push_back({"AUTH", m_endpoint.password});
      } else {
        hello.push_back({"AUTH", m_endpoint.user, m_endpoint.password});
      }
    }
    if (m_endpoint.db != 0) hello.push_back({"SELECT", std::to_string(m_endpoint.db)});
    if (!m_greeting.empty()) hello.push_back(m_greeting);
    for (const Command& h : hello) m_hello_names.push_back(h.front());
    m_wire = format_all(hello);
  }
  m_wire += format_all(commands);
  m_expected = m_hello_names.size() + commands.size();
  m_undo = undo ? &undo : nullptr;  // made and formatted only if it is ever sent (send_undo)
  try {
    if (fresh) {
      begin_connect();
    } else {
      m_state = State::sending;
      m_want = POLLOUT;
      m_deadline = capped(Clock::now() + m_timeouts.command + m_budget);
    }
  } catch (const Error& e) {
    close();
    m_state = State::failed;
    m_error = e;
    return;
  }
  advance();
}

bool Connection::peer_hung_up() const {
  pollfd p{m_socket.get(), POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

pollfd Connection::pending() const {
  switch (m_state) {
    case State::resolving: return {m_lookup->fd(), POLLIN, 0};
    case State::connecting: return {m_socket.get(), POLLOUT, 0};
    case State::handshaking:
    case State::sending:
    case State::receiving: return {m_socket.get(), m_want, 0};
    default: return {-1, 0, 0};
  }
}

void Connection::begin_connect() {
  m_deadline = capped(Clock::now() + m_timeouts.connect);
  m_connect_error.clear();
  if (m_endpoint.kind == Endpoint::Kind::unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (m_endpoint.path.size() >= sizeof addr.sun_path) fail(exit_code::k_config, "socket path too long");
    std::memcpy(addr.sun_path, m_endpoint.path.c_str(), m_endpoint.path.size() + 1);
    const char* bytes = reinterpret_cast<const char*>(&addr);
    m_addresses = {{std::vector<char>(bytes, bytes + sizeof addr), AF_UNIX}};
    m_next_address = 0;
    try_address();
    return;
  }
  if (m_addresses.empty()) {
    if (!m_lookup) m_lookup = std::make_unique<Lookup>(m_endpoint.host, m_endpoint.port);
    m_state = State::resolving;
    return;
  }
  m_next_address = 0;
  try_address();
}

void Connection::step_resolving() {
  m_addresses = m_lookup->addresses();
  m_lookup.reset();
  m_next_address = 0;
  try_address();
}

void Connection::try_address() {
  for (; m_next_address < m_addresses.size(); ++m_next_address) {
    const Address& a = m_addresses[m_next_address];
    m_socket.reset(::socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!m_socket.valid()) {
      m_connect_error = std::strerror(errno);
      continue;
    }
    if (a.family != AF_UNIX) {
      int one = 1;
      ::setsockopt(m_socket.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    if (::connect(m_socket.get(), reinterpret_cast<const sockaddr*>(a.bytes.data()),
                  static_cast<socklen_t>(a.bytes.size())) == 0) {
      connected_socket();
      return;
    }
    if (errno == EINPROGRESS || errno == EAGAIN) {
      m_state = State::connecting;
      return;
    }
    m_connect_error = std::strerror(errno);
  }
  m_socket.reset();
  fail(fmt::format("cannot connect: {}", m_connect_error.empty() ? "no address" : m_connect_error));
}

void Connection::step_connecting() {
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(m_socket.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == 0) {
    connected_socket();
    return;
  }
  m_connect_error = std::strerror(err);
  ++m_next_address;
  try_address();
}

void Connection::connected_socket() {
  m_ran.clear();
  if (m_endpoint.tls) {
    m_tls = std::make_unique<TlsSession>(m_socket.get(), m_endpoint.host, m_tls_options, m_endpoint.display());
    m_state = State::handshaking;
    m_want = POLLOUT;
    return;
  }
  ready_to_send();
}

void Connection::step_handshaking() {
  if (m_tls->handshake(&m_want)) ready_to_send();
}

void Connection::ready_to_send() {
  m_reader.reset(redisReaderCreate());
  if (!m_reader) throw Error(exit_code::k_internal, "out of memory creating a RESP reader");
  m_state = State::sending;
  m_want = POLLOUT;
  // The exchange's own deadline starts now that the connection is up.
  m_deadline = capped(Clock::now() + m_timeouts.command + m_budget);
}

void Connection::step_sending() {
  while (!m_wire.empty()) {
    short want = POLLOUT;
    ssize_t n = m_tls ? m_tls->write(m_wire.data(), m_wire.size(), &want)
                      : ::send(m_socket.get(), m_wire.data(), m_wire.size(), MSG_NOSIGNAL);
    if (n > 0) {
      m_wire.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (m_tls && n < 0) {
      m_want = want;
      return;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      m_want = POLLOUT;
      return;
    }
    fail(fmt::format("connection lost: {}", std::strerror(errno)));
  }
  m_request_sent = true;
  m_state = State::receiving;
  m_want = POLLIN;
}

void Connection::check_hello(const Reply& r, size_t index) {
  if (!m_greeting.empty() && index + 1 == m_hello_names.size()) {
    m_greeting_reply = r;
    return;
  }
  if (!r.is_error()) return;
  const std::string& what = m_hello_names[index];
  if (what == "AUTH" && r.str.find("without any password configured") != std::string::npos) {
    // REDISCLI_AUTH exported for another server: redis-cli only warns here too.
    log::warning(fmt::format("{} needs no password; ignoring the one given", m_endpoint.display()));
    return;
  }
  if (what == "AUTH") {
    // Where the password came from: the one to fix.
    std::string from = m_endpoint.password_in_url         ? " (password from the URL)"
                       : m_endpoint.password_from.empty() ? ""
                                                          : " (password from " + m_endpoint.password_from + ")";
    fail(exit_code::k_permission, fmt::format("authentication failed{}: {}", from, r.str));
  }
  fail(r.error_code() == "NOAUTH" || r.error_code() == "NOPERM" ? exit_code::k_permission : exit_code::k_config,
       fmt::format("cannot select database {}: {}", m_endpoint.db, r.str));
}

void Connection::check_reply(const Reply& r) {
  std::string code = r.error_code();
  // Redis 7 refuses long commands from a client that has not logged in with a protocol error
  // rather than NOAUTH: both mean the password is missing.
  if (code == "NOAUTH" || r.str.find("unauthenticated") != std::string::npos) {
    fail(exit_code::k_permission,
         "the server requires a password (put it in the URL, --password-file, RLOCK_PASSWORD or REDISCLI_AUTH)");
  }
  // An ACL user without +fcall or +function|load: the scripts run by EVALSHA (see next_way).
  bool function_path = r.str.find("'fcall'") != std::string::npos || r.str.find("'function") != std::string::npos;
  if (code == "NOPERM" && !function_path) fail(exit_code::k_permission, fmt::format("permission denied: {}", r.str));
}

void Connection::step_receiving() {
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(m_reader.get(), &raw) != REDIS_OK) fail("protocol error in the server's reply");
    if (raw) {
      Reply reply = convert(*static_cast<redisReply*>(raw));
      freeReplyObject(raw);
      if (m_received < m_hello_names.size()) {
        check_hello(reply, m_received);
      } else {
        check_reply(reply);
        m_replies.push_back(std::move(reply));
      }
      if (++m_received == m_expected) {
        m_state = State::idle;
        return;
      }
      continue;
    }
    // A server that streams without end must not keep this loop reading past the deadline.
    if (Clock::now() >= m_deadline) fail(timeout_message());
    char buffer[16384];
    short want = POLLIN;
    ssize_t n = m_tls ? m_tls->read(buffer, sizeof buffer, &want) : ::recv(m_socket.get(), buffer, sizeof buffer, 0);
    if (n > 0) {
      m_reply_bytes += static_cast<size_t>(n);
      if (m_reply_bytes > k_max_reply_bytes) fail("the server's reply is too large");
      redisReaderFeed(m_reader.get(), buffer, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) fail("connection closed by the server");
    if (m_tls) {
      m_want = want;
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) fail(fmt::format("connection lost: {}", std::strerror(errno)));
    m_want = POLLIN;
    return;
  }
}

void Connection::send_undo() {
  if (!m_request_sent || !m_undo || !m_socket.valid() || !m_wire.empty()) return;
  const std::string undo = format_all((*m_undo)(*this));
  m_undo = nullptr;
  // One try, never waiting: the socket is being given up.
  if (m_tls) {
    short want = 0;
    try {
      m_tls->write(undo.data(), undo.size(), &want);
    } catch (const Error&) {
    }
  } else {
    [[maybe_unused]] ssize_t n = ::send(m_socket.get(), undo.data(), undo.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  log::verbose("{}: sent the undo of an unanswered request on the same connection", m_endpoint.display());
}

void Connection::advance() {
  try {
    for (;;) {
      State before = m_state;
      switch (m_state) {
        case State::resolving:
          if (m_lookup->done()) step_resolving();
          break;
        case State::connecting: {
          pollfd p{m_socket.get(), POLLOUT, 0};
          if (::poll(&p, 1, 0) == 1) step_connecting();
          break;
        }
        case State::handshaking: step_handshaking(); break;
        case State::sending: step_sending(); break;
        case State::receiving: step_receiving(); break;
        case State::idle:
        case State::failed: return;
      }
      if (m_state == before) break;  // waits for the socket (or the lookup)
    }
    if (Clock::now() >= m_deadline) fail(timeout_message());
  } catch (const Error& e) {
    send_undo();
    m_state = State::failed;
    m_error = e;
    m_tls.reset();
    m_socket.reset();
    m_reader.reset();
  }
}

std::vector<Reply> Connection::result() {
  if (m_state == State::failed) {
    m_state = State::idle;
    Error e = *m_error;
    m_error.reset();
    throw e;
  }
  return std::move(m_replies);
}

std::vector<Reply> Connection::pipeline(const std::vector<Command>& commands, const UndoCommands& undo,
                                        util::Millis budget) {
  start(commands, budget, undo);
  while (!finished()) {
    pollfd fds[2] = {pending(), {m_interrupt_fd, POLLIN, 0}};
    nfds_t count = m_interrupt_fd >= 0 ? 2 : 1;
    util::poll_until(fds, count, m_deadline);
    if (count == 2 && (fds[1].revents & POLLIN) && m_on_interrupt()) {
      abandon();
      break;
    }
    advance();
  }
  m_undo = nullptr;  // the caller's, which goes now
  return result();
}

Reply Connection::call(const Command& argv) { return std::move(pipeline({argv}).front()); }

Reply Connection::call_blocking(const Command& argv, util::Millis budget) {
  return std::move(pipeline({argv}, {}, budget).front());
}

void Connection::abandon() {
  if (finished()) return;
  m_tls.reset();
  m_socket.reset();
  m_reader.reset();
  m_state = State::failed;
  m_error = Error(exit_code::k_unavailable, fmt::format("{}: exchange abandoned", m_endpoint.display()));
}

std::vector<Outcome> exchange_all(const std::vector<Connection*>& connections,
                                  const std::vector<std::vector<Command>>& commands, int interrupt_fd,
                                  const std::function<bool()>& on_interrupt, const Enough& enough) {
  for (size_t i = 0; i < connections.size(); ++i) connections[i]->start(commands[i]);
  return finish_all(connections, interrupt_fd, on_interrupt, enough);
}

std::vector<Outcome> finish_all(const std::vector<Connection*>& connections, int interrupt_fd,
                                const std::function<bool()>& on_interrupt, const Enough& enough) {
  std::vector<Outcome> outcomes(connections.size());
  std::vector<std::optional<Outcome>> so_far(connections.size());
  auto collect = [&](size_t i) {
    if (so_far[i] || !connections[i]->finished()) return false;
    Outcome o;
    try {
      o.replies = connections[i]->result();
    } catch (const Error& e) {
      o.error = e;
    }
    so_far[i] = std::move(o);
    return true;
  };
  for (;;) {
    bool changed = false;
    for (size_t i = 0; i < connections.size(); ++i) changed = collect(i) || changed;
    if (enough && changed && enough(so_far)) {
      for (Connection* c : connections) c->abandon();
      for (size_t i = 0; i < connections.size(); ++i) collect(i);
      break;
    }
    std::vector<pollfd> fds;
    std::vector<size_t> owner;
    std::optional<Clock::time_point> deadline;
    for (size_t i = 0; i < connections.size(); ++i) {
      if (connections[i]->finished()) continue;
      fds.push_back(connections[i]->pending());
      owner.push_back(i);
      if (!deadline || connections[i]->deadline() < *deadline) deadline = connections[i]->deadline();
    }
    if (fds.empty()) break;
    if (interrupt_fd >= 0) fds.push_back({interrupt_fd, POLLIN, 0});
    util::poll_until(fds.data(), fds.size(), deadline);
    if (interrupt_fd >= 0 && (fds.back().revents & POLLIN) && on_interrupt()) {
      for (Connection* c : connections) c->abandon();
    }
    for (size_t k = 0; k < owner.size(); ++k) connections[owner[k]]->advance();
  }
  for (size_t i = 0; i < connections.size(); ++i) {
    collect(i);
    outcomes[i] = std::move(*so_far[i]);
  }
  return outcomes;
}

Command eval_command(const Script& script, const std::vector<std::string>& keys, const std::vector<std::string>& args,
                     bool source) {
  Command c;
  c.reserve(3 + keys.size() + args.size());
  c.emplace_back(source ? "EVAL" : "EVALSHA");
  c.emplace_back(source ? script.source : script.sha1);
  c.push_back(std::to_string(keys.size()));
  c.insert(c.end(), keys.begin(), keys.end());
  c.insert(c.end(), args.begin(), args.end());
  return c;
}

ScriptWay first_way(const Script& script, bool functions) {
  return functions && !script.function.empty() ? ScriptWay::fcall : ScriptWay::evalsha;
}

std::vector<Command> script_commands(const Script& script, ScriptWay way, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& args) {
  auto fcall = [&] {
    Command c{"FCALL", std::string(script.function), std::to_string(keys.size())};
    c.insert(c.end(), keys.begin(), keys.end());
    c.insert(c.end(), args.begin(), args.end());
    return c;
  };
  switch (way) {
    case ScriptWay::fcall: return {fcall()};
    case ScriptWay::load: return {Command{"FUNCTION", "LOAD", "REPLACE", std::string(script.library)}, fcall()};
    case ScriptWay::evalsha: return {eval_command(script, keys, args, false)};
    case ScriptWay::eval: break;
  }
  return {eval_command(script, keys, args, true)};
}

std::optional<ScriptWay> next_way(ScriptWay way, const std::vector<Reply>& replies) {
  if (replies.empty()) return std::nullopt;
  const Reply& last = replies.back();
  // Redis 6 (no FCALL), an ACL without +fcall or +function|load, a server that refuses to load.
  auto refused = [](const Reply& r) {
    return r.is_error() && (r.error_code() == "NOPERM" || r.str.find("unknown command") != std::string::npos ||
                            r.str.find("nknown subcommand") != std::string::npos);
  };
  switch (way) {
    case ScriptWay::fcall:
      if (last.is_error() && last.str.find("Function not found") != std::string::npos) return ScriptWay::load;
      if (refused(last)) return ScriptWay::evalsha;
      return std::nullopt;
    case ScriptWay::load:
      if (replies.front().is_error()) return ScriptWay::evalsha;
      return std::nullopt;
    case ScriptWay::evalsha:
      if (last.error_code() == "NOSCRIPT") return ScriptWay::eval;
      return std::nullopt;
    case ScriptWay::eval: break;
  }
  return std::nullopt;
}

std::vector<Command> undo_commands(const std::vector<ScriptCall>& calls, ScriptWay way, const Connection& on) {
  // A `load` exchange loaded the library ahead of its FCALL.
  ScriptWay same = way == ScriptWay::load ? ScriptWay::fcall : way;
  std::vector<Command> out;
  out.reserve(calls.size());
  for (const ScriptCall& c : calls) {
    ScriptWay w = same == ScriptWay::fcall ? first_way(*c.script, true) : same;
    if (w == ScriptWay::evalsha && !on.has_run(code_of(*c.script, w))) w = ScriptWay::eval;
    out.push_back(script_commands(*c.script, w, c.keys, c.args).front());
  }
  return out;
}

bool functions_wanted() {
  static const bool wanted = [] {
    const char* env = std::getenv("RLOCK_FUNCTIONS");
    return !(env && std::string_view(env) == "0");
  }();
  return wanted;
}

}  // namespace rlock::redis
