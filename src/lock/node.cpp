#include "node.hpp"

#include "error.hpp"
#include "exit_code.hpp"

#include <fmt/core.h>

namespace rlock::lock {

int64_t ClientNode::wait_replicas(int n, util::Millis timeout) {
  redis::Reply r = m_connection.call_blocking({"WAIT", std::to_string(n), std::to_string(timeout.count())}, timeout);
  if (r.type != redis::Reply::Type::integer) {
    throw Error(exit_code::k_internal, fmt::format("unexpected reply to WAIT: {}", r.str));
  }
  return r.integer;
}

}  // namespace rlock::lock
