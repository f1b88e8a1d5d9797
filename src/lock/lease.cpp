#include "lease.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/scripts.hpp"

#include <fmt/core.h>

namespace rlock::lock {

namespace {

std::string text_of(const redis::Reply& r) { return r.type == redis::Reply::Type::string ? r.str : std::string(); }

std::optional<util::Millis> ttl_of(const redis::Reply& r) {
  if (r.type != redis::Reply::Type::integer || r.integer < 0) return std::nullopt;
  return util::Millis(r.integer);
}

[[noreturn]] void unexpected(const LockName& name, std::string_view what) {
  throw Error(exit_code::k_internal, fmt::format("unexpected reply from Redis for {}: {}", name.lock_key(), what));
}

int64_t parse_ms(const std::string& text) {
  try {
    return text.empty() ? 0 : std::stoll(text);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

int64_t ClientNode::wait_replicas(int n, util::Millis timeout) {
  redis::Reply r =
      m_connection.call_blocking({"WAIT", std::to_string(n), std::to_string(timeout.count())}, timeout);
  if (r.type != redis::Reply::Type::integer) {
    throw Error(exit_code::k_internal, fmt::format("unexpected reply to WAIT: {}", r.str));
  }
  return r.integer;
}

void check_reply(const redis::Reply& reply, const LockName& name) {
  if (!reply.is_error()) return;
  if (reply.error_code() == "WRONGTYPE" || reply.str.find("WRONGTYPE") != std::string::npos ||
      reply.str.find("not an integer") != std::string::npos) {
    throw Error(exit_code::k_data, fmt::format("{} holds data that is not an rlock lock (another program uses this "
                                               "name; choose another --prefix or key)",
                                               name.lock_key()));
  }
  // The server cannot serve now (loading, busy script, failover, full memory, migration):
  // unavailable, not a bug of rlock.
  static const char* const k_transient[] = {"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
                                              "NOREPLICAS", "OOM", "READONLY", "MISCONF"};
  for (const char* code : k_transient) {
    if (reply.error_code() == code) {
      throw TransientError(exit_code::k_unavailable,
                           fmt::format("Redis cannot serve {} now: {}", name.lock_key(), reply.str));
    }
  }
  unexpected(name, reply.str);
}

Attempt try_acquire(Node& node, const LockName& name, const std::string& token, util::Millis ttl,
                    const Holder& holder, const std::vector<std::string>& enclosing_tokens) {
  std::vector<std::string> args{token,       std::to_string(ttl.count()), holder.host, holder.pid,
                                holder.user, holder.command};
  args.insert(args.end(), enclosing_tokens.begin(), enclosing_tokens.end());
  // If the answer is lost to a timeout, the server may still run the acquire later (it was only
  // slow): the release, sent right behind it on the same connection, then runs right after it,
  // instead of the lock staying with an exited process for its whole TTL.
  std::vector<redis::Command> undo = {
      {"EVAL", std::string(scripts::k_release.source), "2", name.lock_key(), name.info_key(), token}};
  auto sent_at = util::BootClock::now();
  redis::Reply r = node.eval(scripts::k_acquire, {name.lock_key(), name.fence_key(), name.info_key()}, args, undo);
  check_reply(r, name);
  if (r.type != redis::Reply::Type::array || r.elements.size() < 2 ||
      r.elements[0].type != redis::Reply::Type::integer) {
    unexpected(name, "malformed answer to the acquire script");
  }
  Attempt a;
  a.sent_at = sent_at;
  const auto& e = r.elements;
  switch (e[0].integer) {
    case 1:
      a.outcome = Attempt::Outcome::acquired;
      a.fence = e[1].integer;
      break;
    case 2:
      a.outcome = Attempt::Outcome::reentered;
      a.fence = e[1].integer;
      if (e.size() < 4 || e[3].integer < 1 || static_cast<size_t>(e[3].integer) > enclosing_tokens.size()) {
        unexpected(name, "malformed answer to the acquire script");
      }
      a.ttl_left = ttl_of(e[2]);
      a.enclosing = static_cast<size_t>(e[3].integer - 1);
      break;
    default:
      a.outcome = Attempt::Outcome::busy;
      a.ttl_left = ttl_of(e[1]);
      if (e.size() >= 7) {
        a.holder.host = text_of(e[2]);
        a.holder.pid = text_of(e[3]);
        a.holder.command = text_of(e[4]);
        int64_t since = parse_ms(text_of(e[5]));
        int64_t now = parse_ms(text_of(e[6]));
        if (since > 0 && now >= since) a.held_for = util::Millis(now - since);
      }
  }
  return a;
}

void confirm_replicas(Node& node, const LockName& name, int n, util::Millis timeout) {
  int64_t acks = node.wait_replicas(n, timeout);
  if (acks < n) {
    throw Error(exit_code::k_unavailable,
                fmt::format("only {} of {} replicas acknowledged {} within {} (--wait-replicas, --wait-timeout)", acks,
                            n, name.lock_key(), util::format_duration(timeout)));
  }
}

bool release(Node& node, const LockName& name, const std::string& token) {
  redis::Reply r = node.eval(scripts::k_release, {name.lock_key(), name.info_key()}, {token});
  check_reply(r, name);
  if (r.type != redis::Reply::Type::integer) unexpected(name, "malformed answer to the release script");
  return r.integer == 1;
}

std::optional<Extension> extend(Node& node, const LockName& name, const std::string& token,
                                std::optional<util::Millis> ttl) {
  redis::Reply r = node.eval(scripts::k_extend, {name.lock_key(), name.info_key()},
                             {token, ttl ? std::to_string(ttl->count()) : std::string()});
  check_reply(r, name);
  if (r.type == redis::Reply::Type::integer && r.integer == 0) return std::nullopt;
  if (r.type != redis::Reply::Type::array || r.elements.size() != 2 ||
      r.elements[1].type != redis::Reply::Type::integer) {
    unexpected(name, "malformed answer to the extend script");
  }
  return Extension{ttl_of(r.elements[0]), util::Millis(r.elements[1].integer)};
}

ForcedRelease force_release(Node& node, const LockName& name) {
  redis::Reply r = node.eval(scripts::k_force_release, {name.lock_key(), name.info_key()}, {});
  check_reply(r, name);
  if (r.type != redis::Reply::Type::array || r.elements.size() != 2) {
    unexpected(name, "malformed answer to the force-release script");
  }
  ForcedRelease out;
  out.was_held = r.elements[0].integer > 0;
  const auto& info = r.elements[1].elements;
  for (size_t i = 0; i + 1 < info.size(); i += 2) {
    const std::string& field = info[i].str;
    const std::string& value = info[i + 1].str;
    if (field == "host") out.holder.host = value;
    else if (field == "pid") out.holder.pid = value;
    else if (field == "user") out.holder.user = value;
    else if (field == "cmd") out.holder.command = value;
    else if (field == "fence") out.fence = parse_ms(value);
  }
  return out;
}

}  // namespace rlock::lock
