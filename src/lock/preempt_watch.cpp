#include "preempt_watch.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "redis/client.hpp"
#include "redis/connection.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace rlock::lock {

using Clock = util::BootClock;
using util::Millis;

std::optional<PreemptWatch> PreemptWatch::open(Backend& backend, const LockName& name, const std::string& id,
                                               Millis ttl) {
  redis::Client* client = backend.single();
  if (!client) return std::nullopt;
  return PreemptWatch(*client, name.mailbox(id), std::clamp(ttl / 3, Millis(1000), Millis(30'000)));
}

PreemptWatch::PreemptWatch(redis::Client& client, std::string mailbox, Millis block)
    : m_client(&client), m_mailbox(std::move(mailbox)), m_block(block) {}

PreemptWatch::PreemptWatch(PreemptWatch&&) noexcept = default;
PreemptWatch& PreemptWatch::operator=(PreemptWatch&&) noexcept = default;
PreemptWatch::~PreemptWatch() = default;

pollfd PreemptWatch::pending() const { return m_running ? m_connection->pending() : pollfd{-1, 0, 0}; }

Clock::time_point PreemptWatch::wake() const {
  if (!m_running) return m_retry_at;
  return m_connection->finished() ? Clock::time_point{} : m_connection->deadline();
}

bool PreemptWatch::step() {
  if (!m_running) {
    if (Clock::now() >= m_retry_at) start();
    return false;
  }
  try {
    m_connection->advance();
    if (!m_connection->finished()) return false;
    m_running = false;
    std::vector<redis::Reply> replies = m_connection->result();
    if (!replies.empty() && replies.front().type == redis::Reply::Type::array) {
      start();
      return true;
    }
    if (!replies.empty() && replies.front().is_error()) {
      throw Error(exit_code::k_unavailable, replies.front().str);
    }
    start();  // timed out: block again
  } catch (const Error& e) {
    failed(e.what());
  }
  return false;
}

void PreemptWatch::start() {
  try {
    if (!m_connection) m_connection = m_client->open_sibling();
    m_connection->start({{"BLPOP", m_mailbox, fmt::format("{}.{:03}", m_block.count() / 1000, m_block.count() % 1000)}},
                        m_block);
    m_running = true;
  } catch (const Error& e) {
    failed(e.what());
  }
}

void PreemptWatch::failed(const std::string& why) {
  m_running = false;
  m_connection.reset();
  m_retry_at = Clock::now() + std::chrono::seconds(1);
  log::verbose("watching for --preempt requests: {}; again in 1s (renewals still notice them)", why);
}

}  // namespace rlock::lock
