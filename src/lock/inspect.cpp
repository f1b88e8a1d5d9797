#include "inspect.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/protocol.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <span>
#include <string_view>

namespace rlock::lock {

namespace {

using redis::Reply;
namespace info = protocol::info;
namespace holder = protocol::holder;
namespace waiter = protocol::waiter;

std::optional<int64_t> to_int(const std::string& text) {
  long long v = 0;
  if (!util::parse_int(text, INT64_MIN, INT64_MAX, v)) return std::nullopt;
  return v;
}

std::optional<int64_t> to_int(const Reply& r) {
  if (r.type == Reply::Type::integer) return r.integer;
  return to_int(r.str);
}

// Escapes the glob metacharacters of Redis's MATCH in literal text.
std::string glob_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::optional<int64_t> since_to_held(std::optional<int64_t> since, int64_t now) {
  if (!since) return std::nullopt;
  return std::max<int64_t>(0, now - *since);
}

// "field" -> value, from the flat reply of HGETALL.
std::map<std::string, std::string> field_map(const Reply& r) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) out[r.elements[i].str] = r.elements[i + 1].str;
  return out;
}

// The fields read of each holder and waiter, in the order of the HMGETs of the second round: their
// own, then the record who's (whatever fields protocol.txt gives it).
// (Made at compile time: no static initialiser for every rlock's start-up.)
template <size_t N, size_t R>
constexpr std::array<std::string_view, N + R> with_who(const std::array<std::string_view, N>& own,
                                                       const std::array<std::string_view, R>& who) {
  std::array<std::string_view, N + R> out{};
  for (size_t i = 0; i < N; ++i) out[i] = own[i];
  for (size_t i = 0; i < R; ++i) out[N + i] = who[i];
  return out;
}
constexpr auto k_holder_fields = with_who(std::array{holder::mode, holder::since, holder::fence, holder::ttl,
                                                     holder::slot, holder::keeper, holder::watched, holder::lingering},
                                          protocol::who_fields::holder);
constexpr auto k_waiter_fields = with_who(std::array{waiter::mode, waiter::since}, protocol::who_fields::waiter);
// Each HMGET of the second round asks for a field "-" first (HMGET needs one, even for an empty
// holders or queue list): the fields asked for start after it.
constexpr size_t k_hmget_first = 1;

// One holder's or waiter's fields from an HMGET reply of the second round, by field: the n-th
// entry's (an id's), reading `names` per entry.
std::map<std::string_view, std::string> entry_fields(const Reply& hmget, size_t n,
                                                     std::span<const std::string_view> names) {
  std::map<std::string_view, std::string> out;
  for (size_t f = 0; f < names.size(); ++f) {
    size_t at = k_hmget_first + n * names.size() + f;
    out[names[f]] = at < hmget.elements.size() ? hmget.elements[at].str : std::string();
  }
  return out;
}

// The ids in a ZRANGE reply (with scores: every other element).
std::vector<std::string> ids_of(const Reply& r, bool with_scores) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < r.elements.size(); i += with_scores ? 2 : 1) ids.push_back(r.elements[i].str);
  return ids;
}

int64_t now_of(const Reply& time) {
  if (time.elements.size() != 2) return 0;
  return to_int(time.elements[0]).value_or(0) * 1000 + to_int(time.elements[1]).value_or(0) / 1000;
}

// The first round's replies, by what they read.
enum First { k_type, k_pttl, k_value, k_info, k_fence, k_limit, k_holders, k_queue, k_time, k_first_count };
// The second round's: the live holders and waiters counted, their fields (HMGET), then each
// waiter's lease (ZSCORE), in the queue's order.
enum Second { k_holder_count, k_waiter_count, k_holder_fields_of, k_waiter_fields_of, k_leases };

bool lower_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Whether the string at the lock's key is rlock's, as the scripts judge it (common/view.lua,
// lock_value_ours): a token (48 hex digits) or a lingering mark (~ and the id), with an expiry,
// of the holder that :info names, if it names one.
bool lock_value_ours(const Reply& value, const Reply& pttl, const std::string& holder_id) {
  if (pttl.type != Reply::Type::integer || pttl.integer < 0 || value.type != Reply::Type::string) return false;
  const std::string& v = value.str;
  std::string id;
  if (v.size() == 48 && lower_hex(v)) {
    id = v.substr(0, 16);
  } else if (v.size() == 17 && v[0] == '~' && lower_hex(std::string_view(v).substr(1))) {
    id = v.substr(1);
  } else {
    return false;
  }
  return holder_id.empty() || holder_id == id;
}

}  // namespace

std::vector<redis::Command> inspect_first(const LockName& name, int most) {
  const std::string last = std::to_string(std::max(most, 1) - 1);
  return {{"TYPE", name.lock_key()},
          {"PTTL", name.lock_key()},
          {"GET", name.lock_key()},
          {"HGETALL", name.info_key()},
          {"GET", name.fence_key()},
          {"HGET", name.key_of(Part::semaphore), std::string(protocol::sem::limit)},
          {"ZRANGE", name.key_of(Part::holders), "0", last, "WITHSCORES"},
          {"ZRANGE", name.key_of(Part::queue), "0", last},
          {"TIME"}};
}

std::vector<redis::Command> inspect_second(const LockName& name, const std::vector<Reply>& first) {
  if (first.size() != k_first_count) return {};
  const std::string after = fmt::format("({}", now_of(first[k_time]));
  redis::Command holders{"HMGET", name.key_of(Part::holder_info), "-"};
  for (const std::string& id : ids_of(first[k_holders], true)) {
    for (std::string_view f : k_holder_fields) holders.push_back(id + "." + std::string(f));
  }
  redis::Command waiters{"HMGET", name.key_of(Part::waiters), "-"};
  std::vector<std::string> queue = ids_of(first[k_queue], false);
  for (const std::string& id : queue) {
    for (std::string_view f : k_waiter_fields) waiters.push_back(id + "." + std::string(f));
  }
  std::vector<redis::Command> out = {{"ZCOUNT", name.key_of(Part::holders), after, "+inf"},
                                     {"ZCOUNT", name.key_of(Part::leases), after, "+inf"},
                                     holders,
                                     waiters};
  for (const std::string& id : queue) out.push_back({"ZSCORE", name.key_of(Part::leases), id});
  return out;
}

LockState inspect(Node& node, const LockName& name, int most) {
  std::vector<Reply> first = node.pipeline(inspect_first(name, most));
  // A foreign type is named before the second round reads on.
  for (const Reply& r : first) {
    if (r.is_error()) return parse_inspect(name, first, {});
  }
  return parse_inspect(name, first, node.pipeline(inspect_second(name, first)));
}

LockState parse_inspect(const LockName& name, const std::vector<Reply>& r, const std::vector<Reply>& second,
                        std::string* holder_id) {
  if (r.size() != k_first_count) {
    throw Error(exit_code::k_internal,
                fmt::format("unexpected reply from Redis for {}: malformed answers", name.lock_key()));
  }
  // Another program's data at any of the lock's keys is named, as the lock scripts name it: status
  // and run agree on what is wrong.
  const std::vector<redis::Command> commands = inspect_first(name, 1);
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].is_error() && r[i].error_code() == "WRONGTYPE" && commands[i].size() > 1) {
      throw foreign_data(commands[i][1]);
    }
    check_reply(r[i], name);
  }
  for (const Reply& x : second) {
    if (x.is_error() && x.error_code() == "WRONGTYPE") throw foreign_data(name.lock_key());
    check_reply(x, name);
  }
  std::string kind = r[k_type].str;
  if (kind != "none" && kind != "string") throw foreign_data(name.lock_key());
  // The pipeline is not atomic: a lease (or a lingering hold) that ended between TYPE and PTTL or
  // GET left a free lock, not foreign data.
  bool vanished =
      r[k_value].type == Reply::Type::nil || (r[k_pttl].type == Reply::Type::integer && r[k_pttl].integer == -2);
  if (kind == "string" && vanished) kind = "none";
  if (r[k_fence].type == Reply::Type::string && !to_int(r[k_fence])) throw foreign_data(name.fence_key());
  const int64_t now = now_of(r[k_time]);
  LockState s;
  s.key = name.key;
  s.fence = to_int(r[k_fence]);
  s.limit = to_int(r[k_limit]);
  if (kind == "string") {
    HolderState h;
    std::map<std::string, std::string> fields = field_map(r[k_info]);
    auto get = [&fields](std::string_view f) {
      auto it = fields.find(std::string(f));
      return it == fields.end() ? std::string() : it->second;
    };
    if (!lock_value_ours(r[k_value], r[k_pttl], get(info::id))) throw foreign_data(name.lock_key());
    if (r[k_pttl].type == Reply::Type::integer && r[k_pttl].integer >= 0) h.ttl_left_ms = r[k_pttl].integer;
    h.holder = protocol::Who::read(protocol::who_fields::info, get);
    h.since_ms = to_int(get(info::since));
    h.lease_ms = to_int(get(info::ttl));
    h.fence = to_int(get(info::fence));
    h.lingering = get(info::lingering) == "1";
    h.preemptible = get(info::preemptible) == "1";
    h.tick = to_int(get(info::tick));
    h.tick_ran = get(info::tick_ran) == "1";
    if (holder_id) *holder_id = get(info::id);
    if (auto keeper = to_int(get(info::keeper))) {
      h.keeper = KeeperInfo{static_cast<pid_t>(*keeper), static_cast<pid_t>(to_int(get(info::watched)).value_or(0))};
    }
    h.held_for_ms = since_to_held(h.since_ms, now);
    if (!h.fence) h.fence = s.fence;
    s.held = true;
    s.holder_count = 1;
    s.holders.push_back(std::move(h));
  }
  const Reply none{};
  const auto& holders = r[k_holders].elements;
  for (size_t i = 0, n = 0; i + 1 < holders.size(); i += 2, ++n) {
    std::optional<int64_t> expiry = to_int(holders[i + 1].str);
    if (!expiry || *expiry <= now) continue;  // lapsed: reaped at the next change
    auto v = entry_fields(second.size() > k_holder_fields_of ? second[k_holder_fields_of] : none, n, k_holder_fields);
    HolderState h;
    h.holder = protocol::Who::read(protocol::who_fields::holder, [&v](std::string_view f) { return v[f]; });
    h.since_ms = to_int(v[holder::since]);
    h.held_for_ms = since_to_held(h.since_ms, now);
    h.fence = to_int(v[holder::fence]);
    h.lease_ms = to_int(v[holder::ttl]);
    h.slot = static_cast<int>(to_int(v[holder::slot]).value_or(0));
    h.shared = v[holder::mode] == "s";
    h.lingering = v[holder::lingering] == "1";
    h.ttl_left_ms = *expiry - now;
    if (auto keeper = to_int(v[holder::keeper])) {
      h.keeper = KeeperInfo{static_cast<pid_t>(*keeper), static_cast<pid_t>(to_int(v[holder::watched]).value_or(0))};
    }
    s.mode = h.shared ? Mode::shared : Mode::semaphore;
    s.held = true;
    s.holders.push_back(std::move(h));
  }
  if (kind != "string") {
    s.holder_count = second.size() > k_holder_count ? static_cast<int>(to_int(second[k_holder_count]).value_or(0))
                                                    : static_cast<int>(s.holders.size());
  }
  s.queue_length = second.size() > k_waiter_count ? static_cast<int>(to_int(second[k_waiter_count]).value_or(0)) : 0;
  std::vector<std::string> queue = ids_of(r[k_queue], false);
  int position = 0;
  for (size_t n = 0; n < queue.size(); ++n) {
    std::optional<int64_t> lease = second.size() > k_leases + n ? to_int(second[k_leases + n]) : std::nullopt;
    if (!lease || *lease <= now) continue;  // a dead waiter, about to be dropped
    auto v = entry_fields(second.size() > k_waiter_fields_of ? second[k_waiter_fields_of] : none, n, k_waiter_fields);
    WaiterState ws;
    ws.holder = protocol::Who::read(protocol::who_fields::waiter, [&v](std::string_view f) { return v[f]; });
    ws.since_ms = to_int(v[waiter::since]);
    ws.waited_ms = since_to_held(ws.since_ms, now);
    ws.shared = v[waiter::mode] == "s";
    ws.position = ++position;
    s.waiters.push_back(std::move(ws));
  }
  return s;
}

std::vector<std::string> scan_keys(Node& node, const std::string& prefix, const std::string& pattern, bool logs) {
  std::string match =
      glob_escape(prefix) + "{" + pattern + "}" + (logs ? ":" + std::string(protocol::suffix(Part::log)) : "*");
  const std::string holders = "}:" + std::string(protocol::suffix(Part::holders));
  const std::string queue = "}:" + std::string(protocol::suffix(Part::queue));
  const std::string log = "}:" + std::string(protocol::suffix(Part::log));
  std::vector<std::string> keys;
  for (const std::string& full : node.scan(match)) {
    // PREFIX{KEY}, PREFIX{KEY}:h (shared or semaphore holders) or PREFIX{KEY}:q (waiters): a lock
    // someone holds or waits for; not its :fence or other companions. Or PREFIX{KEY}:log.
    if (full.size() < prefix.size() + 2 || full.compare(0, prefix.size(), prefix) != 0 || full[prefix.size()] != '{') {
      continue;
    }
    std::string_view rest = std::string_view(full).substr(prefix.size() + 1);
    std::initializer_list<std::string_view> suffixes = {"}", holders, queue};
    std::initializer_list<std::string_view> log_suffix = {log};
    for (std::string_view suffix : logs ? log_suffix : suffixes) {
      if (rest.size() > suffix.size() && rest.substr(rest.size() - suffix.size()) == suffix) {
        keys.emplace_back(rest.substr(0, rest.size() - suffix.size()));
        break;
      }
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace rlock::lock
