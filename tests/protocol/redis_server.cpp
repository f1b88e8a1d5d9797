#include "redis_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace rlock::test {

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A socket bound to a port of 127.0.0.1 that the kernel chose (not listening); its port.
int bound_socket(int& port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    throw std::runtime_error("cannot bind a loopback port");
  }
  port = ntohs(a.sin_port);
  return fd;
}

// A port of 127.0.0.1 that was free a moment ago, for a server to take.
int free_port() {
  int port = 0;
  close(bound_socket(port));
  return port;
}

// Whether the server listening on port is the process pid (its INFO's process_id): another
// binary's server, running at the same time, may have taken the port that pid was started on.
bool serves(int port, pid_t pid) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in a = loopback(port);
  const std::string ask = "INFO server\r\n";
  const std::string want = "\nprocess_id:" + std::to_string(pid) + "\r";
  std::string reply;
  auto has_id = [&] {
    size_t at = reply.find("\nprocess_id:");
    return at != std::string::npos && reply.find('\r', at) != std::string::npos;
  };
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      write(fd, ask.data(), ask.size()) == static_cast<ssize_t>(ask.size())) {
    char buffer[4096];
    while (!has_id()) {
      ssize_t n = read(fd, buffer, sizeof buffer);
      if (n <= 0) break;
      reply.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  return reply.find(want) != std::string::npos;
}

}  // namespace

int unused_port() {
  // The socket stays bound (and not listening) while the binary runs: no server, this binary's
  // or another's running at the same time, can take its port.
  static std::vector<int> held;
  int port = 0;
  held.push_back(bound_socket(port));
  return port;
}

RedisServer::RedisServer(bool persistent) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/rlock-protocol.XXXXXX";
  std::vector<char> dir(pattern.begin(), pattern.end());
  dir.push_back('\0');
  if (!mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed");
  m_dir = dir.data();
  for (int tries = 0; tries < 20; ++tries) {
    if (start(free_port(), persistent)) return;
  }
  throw std::runtime_error("redis-server did not start (see " + m_dir + "/redis.log)");
}

RedisServer::~RedisServer() {
  if (m_pid > 0) {
    kill(m_pid, SIGKILL);
    waitpid(m_pid, nullptr, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(m_dir, ignored);
}

std::string RedisServer::url() const { return "redis://127.0.0.1:" + std::to_string(m_port); }

bool RedisServer::start(int port, bool persistent) {
  const std::string port_text = std::to_string(port);
  const std::string log = m_dir + "/redis.log";
  std::vector<std::string> args = {"redis-server",
                                   "--port",
                                   port_text,
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   persistent ? "yes" : "no",
                                   "--dir",
                                   m_dir,
                                   "--logfile",
                                   log};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // Dies with the test binary, however it ends.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
    }
    execvp("redis-server", argv.data());
    _exit(127);
  }
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return false;
    if (serves(port, pid)) {
      m_pid = pid;
      m_port = port;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  throw std::runtime_error("redis-server did not listen within 20s (see " + log + ")");
}

RedisServer& shared_server() {
  static RedisServer server;
  return server;
}

RedisServer& quorum_server(int i) {
  static std::array<std::unique_ptr<RedisServer>, 3> servers;
  auto& s = servers.at(static_cast<size_t>(i));
  if (!s) s = std::make_unique<RedisServer>(true);
  return *s;
}

}  // namespace rlock::test
