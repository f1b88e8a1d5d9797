#pragma once

#include <sys/types.h>

#include <string>

namespace rlock::test {

// A redis-server of the tests' own: on a free port of 127.0.0.1, keeping nothing on disk (or,
// persistent, an append-only file), in a temporary directory of its own (its log is there). It dies with the test
// binary, even one that crashes (PR_SET_PDEATHSIG), and is killed and its directory removed by the destructor.
class RedisServer {
public:
  explicit RedisServer(bool persistent = false);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return m_port; }
  pid_t pid() const { return m_pid; }
  // redis://127.0.0.1:PORT
  std::string url() const;

private:
  // Starts redis-server on port; false when it exited (the port was taken meanwhile). It has
  // started when the server on port says it is the one started (another may have the port).
  bool start(int port, bool persistent);

  std::string m_dir;
  int m_port = 0;
  pid_t m_pid = -1;
};

// A port of 127.0.0.1 that nobody listens on, and nobody can while the binary runs (the kernel's
// choice for port 0, kept bound): a server that refuses connections.
int unused_port();

// The one server the binary's tests share (started at first use, killed at exit), and, for the
// Redlock tests, three more: persistent, so that a quorum counts them at once (a master without
// persistence counts only once it has run for a TTL).
RedisServer& shared_server();
RedisServer& quorum_server(int i);

}  // namespace rlock::test
