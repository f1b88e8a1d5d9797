#include "holds.hpp"

#include "util/text.hpp"

namespace rlock::lock {

std::vector<Hold> parse_holds(std::string_view text) {
  std::vector<Hold> holds;
  for (const std::string& line : util::split(text, "\n")) {
    std::vector<std::string> fields = util::split(line, " ");
    if (fields.size() != 6) continue;
    Hold h;
    long long fence = 0, anchor = 0, start = 0;
    if (!util::percent_decode(fields[0], h.lock_key) || !util::percent_decode(fields[1], h.token) ||
        !util::parse_int(fields[2], 0, INT64_MAX, fence) || !util::percent_decode(fields[3], h.boot_id) ||
        !util::parse_int(fields[4], 1, INT32_MAX, anchor) || !util::parse_int(fields[5], 0, INT64_MAX, start)) {
      continue;
    }
    h.fence = fence;
    h.anchor = static_cast<pid_t>(anchor);
    h.anchor_start = static_cast<uint64_t>(start);
    holds.push_back(std::move(h));
  }
  return holds;
}

std::string format_holds(const std::vector<Hold>& holds) {
  std::string out;
  for (const Hold& h : holds) {
    if (!out.empty()) out += '\n';
    out += util::percent_encode(h.lock_key) + ' ' + util::percent_encode(h.token) + ' ' + std::to_string(h.fence) +
           ' ' + util::percent_encode(h.boot_id) + ' ' + std::to_string(h.anchor) + ' ' +
           std::to_string(h.anchor_start);
  }
  return out;
}

std::vector<std::string> tokens_for(const std::vector<Hold>& holds, std::string_view lock_key) {
  std::vector<std::string> tokens;
  for (const Hold& h : holds) {
    if (h.lock_key == lock_key) tokens.push_back(h.token);
  }
  return tokens;
}

}  // namespace rlock::lock
