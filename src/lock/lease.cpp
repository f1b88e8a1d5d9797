#include "lease.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/protocol.hpp"
#include "lock/scripts.hpp"
#include "log.hpp"
#include "util/random.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>

namespace rlock::lock {

namespace {

using protocol::Code;
using redis::Reply;
namespace reply = protocol::reply;

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

// Wakes the contenders a script named: a push to each one's own mailbox. Best effort: a waiter
// whose push is lost wakes at its next heartbeat anyway.
void deliver(Node& node, const LockName& name, const Timing& timing, const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  std::vector<redis::Command> commands;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string mailbox = name.mailbox(ids[i]);
    // An id named twice in a row (a waiter the one behind it may take a push from): one LPUSH of
    // two elements, which serves two of the clients blocked on the mailbox.
    redis::Command push{"LPUSH", mailbox, "1"};
    for (; i + 1 < ids.size() && ids[i + 1] == ids[i]; ++i) push.push_back("1");
    commands.push_back(std::move(push));
    commands.push_back({"LTRIM", mailbox, "0", "0"});
    commands.push_back({"PEXPIRE", mailbox, std::to_string(timing.mailbox.count())});
  }
  try {
    node.pipeline(commands);
  } catch (const Error& e) {
    log::verbose("could not wake {} waiter(s) of {} ({}); they wake at their heartbeat", ids.size(), name.key,
                 e.what());
  }
}

// Runs one of the lock's scripts for the contender with this id: the timing first, then args.
// The mailboxes the script names are pushed.
ScriptReply run_script(Node& node, const LockName& name, const Timing& timing, const redis::Script& script,
                       std::string_view id, std::vector<std::string> args, const redis::Undo& undo = {}) {
  args.insert(args.begin(), timing.script_config());
  ScriptReply r = read_script_reply(node.eval(script, name.script_keys(id), args, undo), name);
  deliver(node, name, timing, r.push);
  return r;
}

// Carries on what a script left for lack of budget (dead waiters at the head, a run of grants),
// so that the next live waiter is served now rather than at its heartbeat. Each call is bounded;
// so is the number of calls.
void finish_work(Node& node, const LockName& name, const Timing& timing, bool more) {
  for (int round = 0; more && round < 10'000; ++round) {
    more = run_script(node, name, timing, scripts::k_advance, "0000000000000000", {}).more;
  }
}

// The holder named in a reply of kind R (busy, waiting): host, pid, cmd, and since when it holds.
template <class R>
void read_holder(const std::vector<Reply>& e, size_t since_at, int64_t now, Attempt& a) {
  a.holder.host = e[R::host].text();
  a.holder.pid = e[R::pid].text();
  a.holder.command = e[R::cmd].text();
  int64_t since = e[since_at].number();
  if (since > 0 && now >= since) a.held_for = util::Millis(now - since);
}

// The waiting reply (lock/protocol.txt, reply waiting).
Attempt read_waiting(const std::vector<Reply>& e, const LockName& name) {
  using R = reply::waiting;
  if (e.size() < R::size) unexpected(name, "malformed waiting reply");
  Attempt a;
  a.outcome = Attempt::Outcome::queued;
  a.position = static_cast<int>(e[R::position].number());
  a.queue_length = static_cast<int>(e[R::queued].number());
  int64_t since = e[R::since].number();
  int64_t now = e[R::now].number();
  if (since > 0 && now >= since) a.waited = util::Millis(now - since);
  read_holder<R>(e, R::held_since, now, a);
  a.lingering = e[R::lingering].number() == 1;
  a.ttl_left = ttl_of(e[R::left]);
  a.epoch = e[R::epoch].text();
  a.arrival = e[R::arrival].text();
  for (size_t i = R::watch; i < e.size(); ++i) a.watch.push_back(e[i].text());
  return a;
}

}  // namespace

std::string new_token() { return util::random_hex(24); }

Holder parse_who(const std::string& text) {
  Holder h;
  std::string* parts[] = {&h.host, &h.pid, &h.user, &h.command};
  size_t start = 0;
  for (size_t i = 0; i < 4; ++i) {
    size_t tab = i < 3 ? text.find('\t', start) : std::string::npos;
    *parts[i] = text.substr(start, tab == std::string::npos ? std::string::npos : tab - start);
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  return h;
}

std::vector<std::string> contender_args(const Contender& c, bool queue, bool redlock) {
  std::string options;
  if (queue) options += 'q';
  if (c.supersede) options += 's';
  if (c.preempt) options += 'p';
  if (c.preemptible) options += 'e';
  if (redlock) options += 'r';
  std::vector<std::string> args{c.token,           std::to_string(c.ttl.count()),
                                c.holder.host,     c.holder.pid,
                                c.holder.user,     c.holder.command,
                                mode_code(c.mode), std::to_string(c.limit),
                                options,           std::to_string(c.min_hold.count())};
  args.push_back(c.tick ? std::to_string(*c.tick) : std::string());
  return args;
}

ScriptReply read_script_reply(Reply reply, const LockName& name) {
  namespace header = protocol::header;
  check_reply(reply, name);
  const auto& e = reply.elements;
  if (reply.type != Reply::Type::array || e.size() < header::size || e[header::code].type != Reply::Type::integer ||
      e[header::push].type != Reply::Type::array) {
    unexpected(name, "malformed answer to a lock script");
  }
  ScriptReply out;
  out.code = static_cast<Code>(e[header::code].integer);
  out.more = e[header::more].number() == 1;
  for (const Reply& id : e[header::push].elements) out.push.push_back(id.text());
  out.payload.assign(std::make_move_iterator(reply.elements.begin() + header::size),
                     std::make_move_iterator(reply.elements.end()));
  return out;
}

Attempt read_attempt(const ScriptReply& r, const LockName& name, size_t enclosing_count) {
  const auto& e = r.payload;
  Attempt a;
  switch (r.code) {
    case reply::taken::code:
      if (e.size() < reply::taken::size) unexpected(name, "malformed answer to a lock script");
      a.outcome = Attempt::Outcome::acquired;
      a.fence = e[reply::taken::fence].number();
      a.slot = static_cast<int>(e[reply::taken::slot].number());
      return a;
    case reply::reentered::code: {
      using R = reply::reentered;
      if (e.size() < R::size || e[R::enclosing].number() < 1 ||
          static_cast<size_t>(e[R::enclosing].number()) > enclosing_count) {
        unexpected(name, "malformed answer to the acquire script");
      }
      a.outcome = Attempt::Outcome::reentered;
      a.fence = e[R::fence].number();
      a.ttl_left = ttl_of(e[R::pttl]);
      a.enclosing = static_cast<size_t>(e[R::enclosing].number() - 1);
      return a;
    }
    case reply::waiting::code: return read_waiting(e, name);
    case reply::leave::code:
      if (e.size() < reply::leave::size) unexpected(name, "malformed answer to the wait script");
      a.outcome = Attempt::Outcome::superseded;
      a.superseded_by = parse_who(e[reply::leave::by].text());
      return a;
    case reply::tick_done::code: {
      using R = reply::tick_done;
      if (e.size() < R::size) unexpected(name, "malformed answer to a lock script");
      a.outcome = Attempt::Outcome::done;
      a.tick = e[R::tick].number();
      a.holder.host = e[R::host].text();
      a.tick_at = e[R::at].number();
      if (a.tick_at > 0 && e[R::now].number() >= a.tick_at) a.held_for = util::Millis(e[R::now].number() - a.tick_at);
      return a;
    }
    case reply::busy::code: {
      using R = reply::busy;
      if (e.size() < R::size) unexpected(name, "malformed answer to the acquire script");
      a.outcome = Attempt::Outcome::busy;
      a.ttl_left = ttl_of(e[R::pttl]);
      read_holder<R>(e, R::since, e[R::now].number(), a);
      a.queue_length = static_cast<int>(e[R::queued].number());
      a.lingering = e[R::lingering].number() == 1;
      return a;
    }
    default: unexpected(name, "unknown answer to a lock script");
  }
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
  static const char* const k_transient[] = {"LOADING",    "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
                                            "NOREPLICAS", "OOM",  "READONLY",   "MISCONF"};
  for (const char* c : k_transient) {
    if (code == c) {
      throw TransientError(exit_code::k_unavailable,
                           fmt::format("Redis cannot serve {} now: {}", name.lock_key(), reply.str));
    }
  }
  unexpected(name, reply.str);
}

Attempt try_acquire(Node& node, const LockName& name, const Timing& timing, const Contender& contender, bool queue,
                    const std::vector<std::string>& enclosing_tokens) {
  std::vector<std::string> keys = name.script_keys(contender.id());
  std::vector<std::string> args = contender_args(contender, queue);
  args.insert(args.end(), enclosing_tokens.begin(), enclosing_tokens.end());
  // If the answer is lost to a timeout, the server may still run the acquire later (it was only
  // slow): the give-back and the leave, sent right behind it on the same connection (as the
  // acquire went: FCALL, or EVALSHA), then run right after it, instead of the lock (or a place in
  // the queue) staying with a process that gave up. The give-back of a hold never used is
  // "returned" in the history; one the acquire did not take is a retry's, never "lost".
  redis::Undo undo = [&] {
    std::string config = timing.script_config();
    std::vector<redis::ScriptCall> calls;
    calls.reserve(2);
    calls.push_back({&scripts::k_release, keys, {config, contender.token, "", "", "", "", "", "", "", "1"}});
    calls.push_back({&scripts::k_cancel, keys, {std::move(config), contender.token, ""}});
    return calls;
  };
  // Dead waiters at the head are dropped a budget at a time: call again until there is an answer.
  for (int round = 0;; ++round) {
    auto sent_at = util::BootClock::now();
    ScriptReply r = run_script(node, name, timing, scripts::k_acquire, contender.id(), args, undo);
    if (r.code == reply::again::code && round < 10'000) continue;
    Attempt a = read_attempt(r, name, enclosing_tokens.size());
    a.sent_at = sent_at;
    return a;
  }
}

namespace {

// The full wait step (wait.lua), called again while the budget runs out.
Attempt full_step(Node& node, const LockName& name, const Timing& timing, const Contender& contender,
                  const Attempt& last) {
  // A waiter behind others after the step has the far lease, and its heartbeat may be the far
  // one; a preemptor steps at every heartbeat (it keeps its request alive).
  std::vector<std::string> args = contender_args(contender, true);
  args.push_back(contender.preempt ? std::string() : std::to_string(timing.far_lease().count()));
  if (last.rejoin_waited && !last.arrival.empty()) {
    args.push_back(last.arrival);
    args.push_back(std::to_string(last.rejoin_waited->count()));
  }
  for (int round = 0;; ++round) {
    auto sent_at = util::BootClock::now();
    ScriptReply r = run_script(node, name, timing, scripts::k_wait, contender.id(), args);
    if (r.code == reply::again::code && round < 10'000) continue;
    Attempt a = read_attempt(r, name, 0);
    a.sent_at = sent_at;
    a.far = a.outcome == Attempt::Outcome::queued && a.position > 1 && !contender.preempt;
    return a;
  }
}

}  // namespace

Attempt wait_turn(Node& node, const LockName& name, const Timing& timing, const Contender& contender,
                  const Attempt& last, util::Millis heartbeat) {
  if (heartbeat.count() <= 0) return full_step(node, name, timing, contender, last);
  redis::Command blpop{"BLPOP", name.mailbox(contender.id())};
  for (const std::string& id : last.watch) {
    if (id != contender.id()) blpop.push_back(name.mailbox(id));
  }
  blpop.push_back(fmt::format("{}.{:03}", heartbeat.count() / 1000, heartbeat.count() % 1000));
  // A waiter that is no preemptor (which keeps its request alive at each step), nor a --once-per
  // run at the head (whose full step looks whether its tick was run meanwhile), may take the light
  // step at a heartbeat that no push woke (beat.lua): while the view it keeps holds (no lease,
  // the holder's included, can have run out), it only renews the place, with the far lease of a
  // waiter behind others, and the waiter keeps that view. It goes in the BLPOP's pipeline and runs
  // on the server the moment the BLPOP returns, so a heartbeat costs one round trip. It may: it
  // claims nothing, so a waiter stopped meanwhile (^Z, SIGSTOP) keeps at most its place for one
  // more heartbeat. (Woken by a push, the waiter takes the full step whatever the light step
  // found.)
  bool light =
      !last.epoch.empty() && !contender.preempt && (last.position > 1 || (last.position == 1 && !contender.tick));
  std::vector<std::string> beat_keys, beat_args;
  std::vector<redis::Command> commands{blpop};
  if (light) {
    beat_keys = {name.key_of(protocol::Part::leases), name.key_of(protocol::Part::epoch)};
    util::Millis lease = last.position > 1 ? timing.far_lease() : timing.lease;
    beat_args = {contender.id(), last.epoch, std::to_string(lease.count()), std::to_string(timing.claim.count())};
    commands.push_back(node.script_command(scripts::k_beat, beat_keys, beat_args));
  }
  std::vector<Reply> woke = node.pipeline(commands, heartbeat);
  bool timed_out = !woke.empty() && woke.front().type == Reply::Type::nil;
  if (light && timed_out && woke.size() == 2) {
    auto sent_at = util::BootClock::now();
    Reply r = std::move(woke[1]);
    // A server without the library (or the script): loaded, and the light step again.
    if (r.is_error()) r = node.eval(scripts::k_beat, beat_keys, beat_args);
    check_reply(r, name);
    if (r.type == Reply::Type::integer && r.integer == static_cast<int64_t>(reply::unchanged::code)) {
      // Nothing changed: the same place, holder and watch list; the time in the queue and the
      // holder's time go on, and the holder's lease left (the head's) is counted down (a renewal
      // since, which changes no epoch, comes with the full step at the old lease's end).
      Attempt a = last;
      a.far = last.position > 1;
      auto elapsed = std::chrono::duration_cast<util::Millis>(sent_at - last.sent_at);
      if (a.waited) a.waited = *a.waited + elapsed;
      if (a.held_for) a.held_for = *a.held_for + elapsed;
      if (a.ttl_left) a.ttl_left = std::max(util::Millis(0), *a.ttl_left - elapsed);
      a.sent_at = sent_at;
      return a;
    }
  }
  // The full step (claim a grant, or renew the place) is a request of its own, sent once awake:
  // were it queued behind the BLPOP, a waiter stopped meanwhile would claim a grant for its whole
  // TTL without knowing; this way its grant lapses after the claim window.
  return full_step(node, name, timing, contender, last);
}

void cancel(Node& node, const LockName& name, const Timing& timing, const std::string& token, bool timed_out) {
  ScriptReply r = run_script(node, name, timing, scripts::k_cancel, id_of(token), {token, timed_out ? "t" : ""});
  finish_work(node, name, timing, r.more);
}

void confirm_replicas(Node& node, const LockName& name, int n, util::Millis timeout) {
  int64_t acks = node.wait_replicas(n, timeout);
  if (acks < n) {
    throw Error(exit_code::k_unavailable,
                fmt::format("only {} of {} replicas acknowledged {} within {} (--wait-replicas, --wait-timeout)", acks,
                            n, name.lock_key(), util::format_duration(timeout)));
  }
}

std::vector<std::string> release_args(const std::string& token, const Ending& ending) {
  std::string used;
  if (ending.used) used = ending.linger ? std::to_string(std::max<int64_t>(ending.linger->count(), 0)) : "h";
  return {token,
          ending.exit_status,
          ending.holder.host,
          ending.holder.pid,
          ending.holder.user,
          ending.holder.command,
          ending.fence ? std::to_string(ending.fence) : "",
          used,
          ending.retry ? "1" : ""};
}

bool release(Node& node, const LockName& name, const Timing& timing, const std::string& token, const Ending& ending) {
  ScriptReply r = run_script(node, name, timing, scripts::k_release, id_of(token), release_args(token, ending));
  finish_work(node, name, timing, r.more);
  return r.code == reply::released::code;
}

std::optional<Extension> extend(Node& node, const LockName& name, const Timing& timing, const std::string& token,
                                std::optional<util::Millis> ttl, const std::optional<KeeperInfo>& keeper) {
  // The default TTL is extend.lua's fallback for a lease that recorded none.
  std::vector<std::string> args{token, ttl ? std::to_string(ttl->count()) : std::string(),
                                std::to_string(k_default_ttl.count())};
  if (keeper) {
    args.push_back(std::to_string(keeper->keeper));
    args.push_back(std::to_string(keeper->watched));
  }
  ScriptReply r = run_script(node, name, timing, scripts::k_extend, id_of(token), args);
  using R = reply::extended;
  if (r.code == reply::not_held::code) return std::nullopt;
  if (r.payload.size() < R::size || r.payload[R::ttl].type != Reply::Type::integer) {
    unexpected(name, "malformed answer to the extend script");
  }
  Extension e{ttl_of(r.payload[R::pttl_before]), util::Millis(r.payload[R::ttl].integer), std::nullopt};
  if (std::string by = r.payload[R::preempted_by].text(); !by.empty()) e.preempted_by = parse_who(by);
  return e;
}

ForcedRelease force_release(Node& node, const LockName& name, const Timing& timing) {
  ForcedRelease out;
  for (int round = 0; round < 100'000; ++round) {
    ScriptReply r = run_script(node, name, timing, scripts::k_force_release, "0000000000000000", {});
    using R = reply::forced;
    namespace info = protocol::info;
    if (r.payload.size() != R::size) unexpected(name, "malformed answer to the force-release script");
    out.was_held = out.was_held || r.payload[R::removed].number() > 0;
    out.shared_holds += static_cast<int>(r.payload[R::shared].number());
    const auto& fields = r.payload[R::info].elements;
    for (size_t i = 0; i + 1 < fields.size(); i += 2) {
      const std::string& field = fields[i].str;
      const std::string& value = fields[i + 1].str;
      if (field == info::host)
        out.holder.host = value;
      else if (field == info::pid)
        out.holder.pid = value;
      else if (field == info::user)
        out.holder.user = value;
      else if (field == info::cmd)
        out.holder.command = value;
      else if (field == info::fence)
        out.fence = fields[i + 1].number();
    }
    if (!r.more) break;
  }
  return out;
}

}  // namespace rlock::lock
