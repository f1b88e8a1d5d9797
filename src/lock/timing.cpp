#include "timing.hpp"

#include "lock/protocol.hpp"

#include <algorithm>

namespace rlock::lock {

Timing Timing::standard(int log_length) {
  Timing t;
  t.log_length = log_length;
  return t;
}

Timing Timing::quiet() const {
  Timing t = *this;
  t.log_length = 0;
  t.summary = false;
  return t;
}

std::vector<std::string> Timing::script_args(const std::vector<std::string>& args) const {
  // keep: the history's expiry with its slack, a sixteenth of it, at most an hour (see
  // keep_history in scripts/common/history.lua).
  int64_t keep = history.count() + std::min<int64_t>(history.count() / 16, 3'600'000);
  std::vector<std::string> out;
  out.reserve(protocol::config::size + args.size());
  out.push_back(std::to_string(lease.count()));
  out.push_back(std::to_string(claim.count()));
  out.push_back(std::to_string(mailbox.count()));
  out.push_back(std::to_string(history.count()));
  out.push_back(std::to_string(keep));
  out.push_back(std::to_string(log_length));
  out.push_back(summary ? "1" : "0");
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

}  // namespace rlock::lock
