#pragma once

// What the protocol tests share: a connection to the test server, the lock of the running test,
// contenders, and a timing of tens of milliseconds.

#include "lock/backend.hpp"
#include "lock/inspect.hpp"
#include "lock/lease.hpp"
#include "lock/node.hpp"
#include "lock/timing.hpp"
#include "redis/client.hpp"
#include "redis/url.hpp"
#include "redis_server.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace rlock::test {

using namespace std::chrono_literals;
using lock::Attempt;
using lock::Contender;
using lock::LockName;
using lock::LockState;
using lock::Mode;
using lock::Timing;
using util::Millis;
using Outcome = lock::Attempt::Outcome;

// Protocol times of tens of milliseconds. Nothing lapses within a test unless the test means it
// to: a waiter's lease and a grant's claim window are long; the tests of lapses shorten them.
inline Timing test_timing() {
  Timing t;
  t.heartbeat = 50ms;
  t.lease = 10s;
  t.claim = 10s;
  t.mailbox = 10s;
  t.history = 60s;
  t.log_length = 100;
  return t;
}

inline lock::Servers servers_of(const std::vector<std::string>& urls) {
  lock::Servers s;
  for (const std::string& u : urls) s.urls.push_back(redis::parse_url(u));
  return s;
}

// Polls pred every few milliseconds until it holds or `within` passes; whether it held.
inline bool eventually(const std::function<bool()>& pred, Millis within = 10s) {
  auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(5ms);
  }
}

inline Millis since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
}

// One test's view of the shared server: its own lock (named after the test), an empty database
// at the start, and calls into lock:: with the test's timing.
class ProtocolTest : public testing::Test {
protected:
  ProtocolTest()
      : m_client(redis::parse_url(shared_server().url()), redis::Timeouts{}, redis::TlsOptions{}), node(m_client) {}

  void SetUp() override { ASSERT_EQ(m_client.call({"FLUSHALL"}).str, "OK"); }

  // A contender named by pid (its holder's pid, as inspect shows it).
  static Contender contender(const std::string& pid, Mode mode = Mode::exclusive, int limit = 1, Millis ttl = 30s) {
    Contender c;
    c.token = lock::new_token();
    c.ttl = ttl;
    c.holder = {.host = "host", .pid = pid, .user = "user", .cmd = "cmd " + pid};
    c.mode = mode;
    c.limit = limit;
    return c;
  }

  Attempt acquire(const Contender& c, bool queue = true, const Timing* t = nullptr) {
    return lock::try_acquire(node, name, t ? *t : timing, c, queue, {});
  }
  // a holds the lock, b waits at the head of the queue and c behind it: c's attempt.
  Attempt holder_head_and_behind(const Contender& a, const Contender& b, const Contender& c) {
    EXPECT_EQ(acquire(a).outcome, Outcome::acquired);
    EXPECT_EQ(acquire(b).outcome, Outcome::queued);
    return acquire(c);
  }
  // One wait step of c, after its last answer (its watch list; a light step if nothing it must see
  // changed, unless fresh).
  Attempt step(const Contender& c, const Attempt& last, Millis heartbeat = 50ms, const Timing* t = nullptr,
               bool fresh = false) {
    return lock::wait_turn(node, name, t ? *t : timing, c, last, heartbeat, fresh);
  }
  // A full step of c: its position and holder as they are now.
  Attempt fresh_step(const Contender& c, const Attempt& last) { return step(c, last, 50ms, nullptr, true); }
  bool release(const Contender& c) { return lock::release(node, name, timing, c.token, lock::Ending{}); }
  LockState state(int most = 100) { return lock::inspect(node, name, most); }
  redis::Reply call(const redis::Command& command) { return m_client.call(command); }

  // A Backend of the test server with the test's timing.
  std::unique_ptr<lock::Backend> backend() const {
    return lock::single_backend(servers_of({shared_server().url()}), timing);
  }

private:
  redis::Client m_client;

protected:
  lock::ClientNode node;
  Timing timing = test_timing();
  LockName name{"rlock:", testing::UnitTest::GetInstance()->current_test_info()->name()};
};

}  // namespace rlock::test
