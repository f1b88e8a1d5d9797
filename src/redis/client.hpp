#pragma once

#include "redis/connection.hpp"
#include "redis/url.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rlock::redis {

// Where rlock's commands go. Knows the URL's kind: asks the sentinels for the master (checking
// its ROLE, and asking again after a failover or a READONLY answer), follows Cluster MOVED and
// ASK redirections (at most k_max_redirects per command), and runs scripts by EVALSHA with an
// EVAL fallback on whichever node answers NOSCRIPT. One Connection per node, opened lazily.
class Client {
public:
  Client(Url url, Timeouts timeouts, TlsOptions tls);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // See Connection::set_interrupt and Connection::cap_waits; applies to every node.
  void set_interrupt(int fd, std::function<void()> on_ready);
  void cap_waits(std::optional<Clock::time_point> cap);

  // Sends the commands (all for one hash slot) in one write and returns their replies.
  std::vector<Reply> pipeline(const std::vector<Command>& commands);
  Reply call(const Command& argv);
  // Like call, allowing the server `budget` more than --timeout to answer (WAIT).
  Reply call_blocking(const Command& argv, util::Millis budget);
  Reply eval(const Script& script, const std::vector<std::string>& keys, const std::vector<std::string>& args);
  // Runs SCAN with MATCH on every master (each Cluster master, or the one server) and returns the keys.
  std::vector<std::string> scan(const std::string& match);

  // Sentinel: asks the sentinels which server is the master now and moves there if it changed.
  // The old master may stay writable for a while after a failover; renewing there would let the
  // lock's copy on the new master expire. run calls this before every renewal.
  void follow_failover();

  const Url& url() const { return m_url; }
  static constexpr int k_max_redirects = 5;

private:
  Connection& current();
  Connection& node(const std::string& host, int port);
  void resolve_master();
  // The master's address according to the first sentinel that knows it; last explains a failure.
  std::optional<std::pair<std::string, int>> ask_sentinels(std::string& last);
  std::vector<Reply> routed(const std::vector<Command>& commands, util::Millis budget);
  void configure(Connection& c);

  Url m_url;
  Timeouts m_timeouts;
  TlsOptions m_tls;
  std::map<std::string, std::unique_ptr<Connection>> m_nodes;
  std::map<std::string, std::unique_ptr<Connection>> m_sentinels;
  Connection* m_current = nullptr;
  int m_interrupt_fd = -1;
  std::function<void()> m_on_interrupt;
  std::optional<Clock::time_point> m_cap;
};

}  // namespace rlock::redis
