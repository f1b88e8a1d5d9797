#pragma once

#include "redis/connection.hpp"
#include "redis/reply.hpp"

#include <string>
#include <vector>

namespace rlock::lock {

// What the lock algorithms need of one Redis server: run a script, run commands.
// Implemented over a redis::Connection; tests may drive the algorithms with a fake.
class Node {
public:
  virtual ~Node() = default;
  virtual redis::Reply eval(const redis::Script& script, const std::vector<std::string>& keys,
                            const std::vector<std::string>& args) = 0;
  virtual std::vector<redis::Reply> pipeline(const std::vector<redis::Command>& commands) = 0;
};

// A Node over one connection.
class ConnectionNode final : public Node {
public:
  explicit ConnectionNode(redis::Connection& connection) : m_connection(connection) {}
  redis::Reply eval(const redis::Script& script, const std::vector<std::string>& keys,
                    const std::vector<std::string>& args) override {
    return m_connection.eval(script, keys, args);
  }
  std::vector<redis::Reply> pipeline(const std::vector<redis::Command>& commands) override {
    return m_connection.pipeline(commands);
  }

private:
  redis::Connection& m_connection;
};

}  // namespace rlock::lock
