#pragma once

#include "redis/reply.hpp"
#include "redis/tls.hpp"
#include "redis/url.hpp"
#include "util/duration.hpp"
#include "util/fd.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct redisReader;

namespace rlock::redis {

using Clock = std::chrono::steady_clock;
using Command = std::vector<std::string>;

struct Timeouts {
  util::Millis connect{1000};  // TCP or unix connect
  util::Millis command{2000};  // from sending a command (or pipeline) to its last reply
};

// A Lua script run by EVALSHA, falling back to EVAL when the server does not have it cached.
struct Script {
  std::string_view name;
  std::string_view source;
  std::string_view sha1;  // computed at build time
};

// One connection to one Redis server over rlock's own socket (TCP or unix), with hiredis as the RESP codec.
// Connects lazily, logs in (AUTH, SELECT) on connect, and bounds every wait by the timeouts.
// Transport failures throw rlock::Error (69 unavailable, 77 refused) and close the socket, so the
// next call reconnects; error replies of the server come back as Reply values.
class Connection {
public:
  Connection(Endpoint endpoint, Timeouts timeouts, TlsOptions tls = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // While waiting for the server, also watch fd and call on_ready when it is readable
  // (run forwards signals this way, without network I/O in a handler).
  void set_interrupt(int fd, std::function<void()> on_ready);

  // Sends the commands in one write and returns their replies, in order.
  std::vector<Reply> pipeline(const std::vector<Command>& commands);
  // Sends one command and returns its reply.
  Reply call(const Command& argv);
  // Like call, allowing the server `budget` more than --timeout to answer (a blocking command).
  Reply call_blocking(const Command& argv, util::Millis budget);

  // No wait (connect, send, reply) goes past this instant, whatever the timeouts say; nullopt lifts it.
  // run caps its renewals at the moment it must start stopping the child.
  void cap_waits(std::optional<Clock::time_point> cap) { m_cap = cap; }

  // Closes the socket; the next call reconnects.
  void close();
  const Endpoint& endpoint() const { return m_endpoint; }
  const Timeouts& timeouts() const { return m_timeouts; }

private:
  void connect();
  void connect_socket(Clock::time_point deadline);
  std::vector<Reply> exchange(const std::vector<Command>& commands, bool check_auth, util::Millis budget = {});
  std::vector<Reply> exchange_once(const std::vector<Command>& commands, bool check_auth, util::Millis budget);
  void write_all(const std::string& data, Clock::time_point deadline);
  Reply read_reply(Clock::time_point deadline);
  void wait_for(short events, Clock::time_point deadline, std::string_view what);
  [[noreturn]] void fail(const std::string& why);

  Endpoint m_endpoint;
  Timeouts m_timeouts;
  TlsOptions m_tls_options;
  util::Fd m_socket;
  std::unique_ptr<TlsSession> m_tls;  // set on rediss:// connections
  std::unique_ptr<redisReader, void (*)(redisReader*)> m_reader;
  Clock::time_point capped(Clock::time_point deadline) const { return m_cap && *m_cap < deadline ? *m_cap : deadline; }

  std::optional<Clock::time_point> m_cap;
  // Resolved once: a reconnect during run must not block in a DNS lookup past the deadline.
  std::vector<std::vector<char>> m_addresses;  // sockaddr bytes
  std::vector<int> m_families;
  int m_interrupt_fd = -1;
  std::function<void()> m_on_interrupt;
};

}  // namespace rlock::redis
