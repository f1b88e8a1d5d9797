#pragma once

#include "redis/client.hpp"
#include "util/duration.hpp"
#include "redis/reply.hpp"

#include <string>
#include <vector>

namespace rlock::lock {

// What the lock algorithms need of one Redis server: run a script, run commands.
// Implemented over a redis::Connection; tests may drive the algorithms with a fake.
class Node {
public:
  virtual ~Node() = default;
  // Runs a script. `undo`: commands the server should run right after it if the answer is lost
  // to a timeout (see redis::Connection::pipeline); best effort.
  virtual redis::Reply eval(const redis::Script& script, const std::vector<std::string>& keys,
                            const std::vector<std::string>& args, const redis::Undo& undo = {}) = 0;
  // Sends the commands in one write; `budget`: time the server may take beyond the I/O timeout
  // (a blocking command among them).
  virtual std::vector<redis::Reply> pipeline(const std::vector<redis::Command>& commands, util::Millis budget = {}) = 0;
  // The command that runs a script the first way this node would (FCALL or EVALSHA), for a
  // pipeline; its error reply (a server without the library or the script) is the caller's to
  // handle, by eval.
  virtual redis::Command script_command(const redis::Script& script, const std::vector<std::string>& keys,
                                        const std::vector<std::string>& args) {
    return redis::eval_command(script, keys, args, false);
  }
  // The keys matching a SCAN pattern on every master.
  virtual std::vector<std::string> scan(const std::string& match) = 0;
  // WAIT: how many replicas acknowledged the writes so far, waiting at most timeout for n.
  virtual int64_t wait_replicas(int n, util::Millis timeout) = 0;
};

// A Node over a client (one server, a Sentinel master, or a Cluster).
class ClientNode final : public Node {
public:
  explicit ClientNode(redis::Client& client) : m_connection(client) {}
  redis::Reply eval(const redis::Script& script, const std::vector<std::string>& keys,
                    const std::vector<std::string>& args, const redis::Undo& undo = {}) override {
    return m_connection.eval(script, keys, args, undo);
  }
  std::vector<redis::Reply> pipeline(const std::vector<redis::Command>& commands, util::Millis budget = {}) override {
    return m_connection.pipeline(commands, {}, budget);
  }
  redis::Command script_command(const redis::Script& script, const std::vector<std::string>& keys,
                                const std::vector<std::string>& args) override {
    return redis::script_commands(script, redis::first_way(script, m_connection.functions()), keys, args).front();
  }
  std::vector<std::string> scan(const std::string& match) override { return m_connection.scan(match); }
  int64_t wait_replicas(int n, util::Millis timeout) override;

private:
  redis::Client& m_connection;
};

}  // namespace rlock::lock
