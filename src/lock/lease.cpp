#include "lease.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/scripts.hpp"
#include "util/random.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

namespace rlock::lock {

namespace {

using redis::Reply;

std::string text_of(const Reply& r) {
  if (r.type == Reply::Type::string || r.type == Reply::Type::status) return r.str;
  if (r.type == Reply::Type::integer) return std::to_string(r.integer);
  return {};
}

int64_t number_of(const Reply& r) {
  if (r.type == Reply::Type::integer) return r.integer;
  long long v = 0;
  return util::parse_int(text_of(r), INT64_MIN, INT64_MAX, v) ? v : 0;
}

std::optional<util::Millis> ttl_of(const Reply& r) {
  if (r.type != Reply::Type::integer || r.integer < 0) return std::nullopt;
  return util::Millis(r.integer);
}

[[noreturn]] void unexpected(const LockName& name, std::string_view what) {
  throw Error(exit_code::k_internal, fmt::format("unexpected reply from Redis for {}: {}", name.lock_key(), what));
}

const char* mode_code(Mode m) {
  switch (m) {
    case Mode::shared: return "s";
    case Mode::semaphore: return "n";
    default: return "x";
  }
}

std::vector<std::string> contender_args(const Contender& c) {
  return {c.token, std::to_string(c.ttl.count()), c.holder.host, c.holder.pid, c.holder.user, c.holder.command,
          mode_code(c.mode), std::to_string(c.limit)};
}

// EVAL of a script with the lock's keys (for an undo, which is sent as it is, without EVALSHA).
redis::Command eval_command(const redis::Script& script, const std::vector<std::string>& keys,
                            const std::vector<std::string>& args) {
  redis::Command c{"EVAL", std::string(script.source), std::to_string(keys.size())};
  c.insert(c.end(), keys.begin(), keys.end());
  c.insert(c.end(), args.begin(), args.end());
  return c;
}

// The holder named in a reply: host, pid, cmd, since, from e[at].
void read_holder(const std::vector<Reply>& e, size_t at, int64_t now, Attempt& a) {
  if (e.size() < at + 4) return;
  a.holder.host = text_of(e[at]);
  a.holder.pid = text_of(e[at + 1]);
  a.holder.command = text_of(e[at + 2]);
  int64_t since = number_of(e[at + 3]);
  if (since > 0 && now >= since) a.held_for = util::Millis(now - since);
}

// {3, position, queue length, since, now, holder host, pid, cmd, holder since, watch...}
Attempt read_waiting(const std::vector<Reply>& e, const LockName& name) {
  if (e.size() < 9) unexpected(name, "malformed waiting reply");
  Attempt a;
  a.outcome = Attempt::Outcome::queued;
  a.position = static_cast<int>(number_of(e[1]));
  a.queue_length = static_cast<int>(number_of(e[2]));
  int64_t since = number_of(e[3]);
  int64_t now = number_of(e[4]);
  if (since > 0 && now >= since) a.waited = util::Millis(now - since);
  read_holder(e, 5, now, a);
  for (size_t i = 9; i < e.size(); ++i) a.watch.push_back(text_of(e[i]));
  return a;
}

// An acquired or queued reply (the answers of the acquire and wait scripts).
Attempt read_attempt(const Reply& r, const LockName& name, size_t enclosing_count) {
  if (r.type != Reply::Type::array || r.elements.empty() || r.elements[0].type != Reply::Type::integer) {
    unexpected(name, "malformed answer to a lock script");
  }
  const auto& e = r.elements;
  Attempt a;
  switch (e[0].integer) {
    case 1:
      if (e.size() < 3) unexpected(name, "malformed answer to a lock script");
      a.outcome = Attempt::Outcome::acquired;
      a.fence = number_of(e[1]);
      a.slot = static_cast<int>(number_of(e[2]));
      return a;
    case 2:
      if (e.size() < 4 || number_of(e[3]) < 1 || static_cast<size_t>(number_of(e[3])) > enclosing_count) {
        unexpected(name, "malformed answer to the acquire script");
      }
      a.outcome = Attempt::Outcome::reentered;
      a.fence = number_of(e[1]);
      a.ttl_left = ttl_of(e[2]);
      a.enclosing = static_cast<size_t>(number_of(e[3]) - 1);
      return a;
    case 3:
      return read_waiting(e, name);
    default:
      if (e.size() < 8) unexpected(name, "malformed answer to the acquire script");
      a.outcome = Attempt::Outcome::busy;
      a.ttl_left = ttl_of(e[1]);
      read_holder(e, 2, number_of(e[6]), a);
      a.queue_length = static_cast<int>(number_of(e[7]));
      return a;
  }
}

}  // namespace

std::string new_token() { return util::random_hex(24); }

int64_t ClientNode::wait_replicas(int n, util::Millis timeout) {
  redis::Reply r =
      m_connection.call_blocking({"WAIT", std::to_string(n), std::to_string(timeout.count())}, timeout);
  if (r.type != redis::Reply::Type::integer) {
    throw Error(exit_code::k_internal, fmt::format("unexpected reply to WAIT: {}", r.str));
  }
  return r.integer;
}

Error foreign_data(const std::string& key) {
  return Error(exit_code::k_data, fmt::format("{} holds data that is not rlock's (another program uses this name; "
                                              "choose another --prefix or key)",
                                              util::printable(key)));
}

void check_reply(const redis::Reply& reply, const LockName& name) {
  if (!reply.is_error()) return;
  std::string code = reply.error_code();
  if (code == "RLOCKFOREIGN" && reply.str.find("RLOCKFOREIGN fence") != std::string::npos) {
    throw foreign_data(name.fence_key());
  }
  if (code == "WRONGTYPE" || code == "RLOCKFOREIGN" || reply.str.find("WRONGTYPE") != std::string::npos ||
      reply.str.find("not an integer") != std::string::npos) {
    throw foreign_data(name.lock_key());
  }
  if (code == "RLOCKLIMIT") {
    std::vector<std::string> w = util::split(reply.str, " ");
    std::string held = w.size() > 1 ? w[1] : "?";
    std::string asked = w.size() > 2 ? w[2] : "?";
    throw Error(exit_code::k_data,
                fmt::format("{} is used with --limit {} by its holders or waiters, not --limit {} (a lock without "
                            "--limit, or shared, is --limit 1): all holders must agree",
                            name.key, held, asked));
  }
  if (code == "RLOCKUPGRADE") {
    throw Error(exit_code::k_usage,
                fmt::format("{} is held shared by an enclosing hold of this process tree: an exclusive hold inside it "
                            "would wait for itself (take it exclusive outside, or shared inside)",
                            name.key));
  }
  // The server cannot serve now (loading, busy script, failover, full memory, migration):
  // unavailable, not a bug of rlock.
  static const char* const k_transient[] = {"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
                                              "NOREPLICAS", "OOM", "READONLY", "MISCONF"};
  for (const char* c : k_transient) {
    if (code == c) {
      throw TransientError(exit_code::k_unavailable,
                           fmt::format("Redis cannot serve {} now: {}", name.lock_key(), reply.str));
    }
  }
  unexpected(name, reply.str);
}

Attempt try_acquire(Node& node, const LockName& name, const Contender& contender, bool queue,
                    const std::vector<std::string>& enclosing_tokens) {
  std::vector<std::string> keys = name.script_keys(contender.id());
  std::vector<std::string> args = contender_args(contender);
  args.push_back(queue ? "1" : "0");
  args.insert(args.end(), enclosing_tokens.begin(), enclosing_tokens.end());
  // If the answer is lost to a timeout, the server may still run the acquire later (it was only
  // slow): the release and the leave, sent right behind it on the same connection, then run right
  // after it, instead of the lock (or a place in the queue) staying with a process that gave up.
  std::vector<redis::Command> undo = {eval_command(scripts::k_release, keys, {contender.token}),
                                      eval_command(scripts::k_cancel, keys, {contender.token})};
  auto sent_at = util::BootClock::now();
  redis::Reply r = node.eval(scripts::k_acquire, keys, args, undo);
  check_reply(r, name);
  Attempt a = read_attempt(r, name, enclosing_tokens.size());
  a.sent_at = sent_at;
  return a;
}

Attempt wait_turn(Node& node, const LockName& name, const Contender& contender, const std::vector<std::string>& watch,
                  util::Millis heartbeat) {
  std::vector<std::string> keys = name.script_keys(contender.id());
  std::vector<std::string> args = contender_args(contender);
  redis::Command blpop{"BLPOP"};
  for (const std::string& id : watch) blpop.push_back(name.mailbox(id));
  if (watch.empty()) blpop.push_back(name.mailbox(contender.id()));
  blpop.push_back(fmt::format("{}.{:03}", heartbeat.count() / 1000, heartbeat.count() % 1000));
  node.pipeline({blpop}, heartbeat);
  // The step (claim a grant, or renew the place) is a request of its own, sent once awake: were
  // it queued behind the BLPOP, a waiter stopped meanwhile (^Z, SIGSTOP) would claim a grant for
  // its whole TTL without knowing; this way its grant lapses after the claim window.
  auto sent_at = util::BootClock::now();
  Reply r = node.eval(scripts::k_wait, keys, args);
  check_reply(r, name);
  Attempt a = read_attempt(r, name, 0);
  a.sent_at = sent_at;
  return a;
}

void cancel(Node& node, const LockName& name, const std::string& token) {
  check_reply(node.eval(scripts::k_cancel, name.script_keys(id_of(token)), {token}), name);
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
  Reply r = node.eval(scripts::k_release, name.script_keys(id_of(token)), {token});
  check_reply(r, name);
  if (r.type != Reply::Type::integer) unexpected(name, "malformed answer to the release script");
  return r.integer == 1;
}

std::optional<Extension> extend(Node& node, const LockName& name, const std::string& token,
                                std::optional<util::Millis> ttl, const std::optional<KeeperInfo>& keeper) {
  std::vector<std::string> args{token, ttl ? std::to_string(ttl->count()) : std::string()};
  if (keeper) {
    args.push_back(std::to_string(keeper->keeper));
    args.push_back(std::to_string(keeper->watched));
  }
  Reply r = node.eval(scripts::k_extend, name.script_keys(id_of(token)), args);
  check_reply(r, name);
  if (r.type == Reply::Type::integer && r.integer == 0) return std::nullopt;
  if (r.type != Reply::Type::array || r.elements.size() != 2 || r.elements[1].type != Reply::Type::integer) {
    unexpected(name, "malformed answer to the extend script");
  }
  return Extension{ttl_of(r.elements[0]), util::Millis(r.elements[1].integer)};
}

ForcedRelease force_release(Node& node, const LockName& name) {
  Reply r = node.eval(scripts::k_force_release, name.script_keys("0000000000000000"), {});
  check_reply(r, name);
  if (r.type != Reply::Type::array || r.elements.size() != 3) {
    unexpected(name, "malformed answer to the force-release script");
  }
  ForcedRelease out;
  out.was_held = number_of(r.elements[0]) > 0;
  out.shared_holds = static_cast<int>(number_of(r.elements[2]));
  const auto& info = r.elements[1].elements;
  for (size_t i = 0; i + 1 < info.size(); i += 2) {
    const std::string& field = info[i].str;
    const std::string& value = info[i + 1].str;
    if (field == "host") out.holder.host = value;
    else if (field == "pid") out.holder.pid = value;
    else if (field == "user") out.holder.user = value;
    else if (field == "cmd") out.holder.command = value;
    else if (field == "fence") out.fence = number_of(info[i + 1]);
  }
  return out;
}

}  // namespace rlock::lock
