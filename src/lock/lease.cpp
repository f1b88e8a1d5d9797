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

namespace call = protocol::call;
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
  ScriptReply r = read_script_reply(node.eval(script, name.script_keys(id), timing.script_args(args), undo), name);
  deliver(node, name, timing, r.push);
  return r;
}

// Carries on what a script left for lack of budget (dead waiters at the head, a run of grants),
// so that the next live waiter is served now rather than at its heartbeat. Each call is bounded;
// so is the number of calls.
void finish_work(Node& node, const LockName& name, const Timing& timing, bool more) {
  for (int round = 0; more && round < 10'000; ++round) {
    more = run_script(node, name, timing, scripts::k_advance, "0000000000000000", call::advance{}.args()).more;
  }
}

// The holder named in a reply of kind R (busy, waiting): host, pid, cmd, its CI job and note, and
// since when it holds.
template <class R>
void read_holder(const std::vector<Reply>& e, size_t since_at, int64_t now, Attempt& a) {
  a.holder.host = e[R::host].text();
  a.holder.pid = e[R::pid].text();
  a.holder.cmd = e[R::cmd].text();
  a.holder.job = e[R::job].text();
  a.holder.note = e[R::note].text();
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

// The record's fields in order, joined by tabs (who_text in scripts/common/call.lua).
Holder parse_who(const std::string& text) { return Holder::from_values(util::split(text, "\t")); }

namespace {

// What the acquire and wait requests say of a contender: the same arguments, by name.
template <class Call>
Call contender_call(const Contender& c, bool queue, bool redlock) {
  namespace option = protocol::option;
  Call call;
  call.token = c.token;
  call.ttl = std::to_string(c.ttl.count());
  call.who = c.holder;
  call.mode = mode_code(c.mode);
  call.limit = std::to_string(c.limit);
  if (queue) call.options += option::queue;
  if (c.supersede) call.options += option::supersede;
  if (c.preempt) call.options += option::preempt;
  if (c.preemptible) call.options += option::preemptible;
  if (redlock) call.options += option::redlock;
  call.min_hold = std::to_string(c.min_hold.count());
  if (c.once_per) {
    auto age = std::chrono::duration_cast<util::Millis>(util::BootClock::now() - c.once_per->fired_at);
    call.tick = fmt::format("{} {}", c.once_per->period.count(), age.count());
  }
  return call;
}

}  // namespace

call::acquire acquire_call(const Contender& c, bool queue, bool redlock, const std::vector<std::string>& enclosing) {
  call::acquire call = contender_call<call::acquire>(c, queue, redlock);
  call.enclosing = enclosing;
  return call;
}

call::wait wait_call(const Contender& c, std::string far_lease) {
  call::wait call = contender_call<call::wait>(c, true, false);
  call.far_lease = std::move(far_lease);
  return call;
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
  out.code = e[header::code].integer;
  out.more = e[header::more].number() == 1;
  for (const Reply& id : e[header::push].elements) out.push.push_back(id.text());
  out.payload.assign(std::make_move_iterator(reply.elements.begin() + header::size),
                     std::make_move_iterator(reply.elements.end()));
  return out;
}

// The wait script answers as the acquire script does, and may also say leave.
static_assert(static_cast<int64_t>(call::wait::Answer::taken) == static_cast<int64_t>(call::acquire::Answer::taken) &&
              static_cast<int64_t>(call::wait::Answer::waiting) ==
                  static_cast<int64_t>(call::acquire::Answer::waiting) &&
              static_cast<int64_t>(call::wait::Answer::again) == static_cast<int64_t>(call::acquire::Answer::again) &&
              static_cast<int64_t>(call::wait::Answer::tick_done) ==
                  static_cast<int64_t>(call::acquire::Answer::tick_done));

Attempt read_attempt(const ScriptReply& r, const LockName& name, size_t enclosing_count) {
  using Answer = call::acquire::Answer;
  const auto& e = r.payload;
  Attempt a;
  if (answer<call::wait>(r) == call::wait::Answer::leave) {
    if (e.size() < reply::leave::size) unexpected(name, "malformed answer to the wait script");
    a.outcome = Attempt::Outcome::superseded;
    a.superseded_by = parse_who(e[reply::leave::by].text());
    return a;
  }
  switch (answer<call::acquire>(r)) {
    case Answer::taken:
      if (e.size() < reply::taken::size) unexpected(name, "malformed answer to a lock script");
      a.outcome = Attempt::Outcome::acquired;
      a.fence = e[reply::taken::fence].number();
      a.slot = static_cast<int>(e[reply::taken::slot].number());
      return a;
    case Answer::reentered: {
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
    case Answer::waiting: return read_waiting(e, name);
    case Answer::tick_done: {
      using R = reply::tick_done;
      if (e.size() < R::size) unexpected(name, "malformed answer to a lock script");
      a.outcome = Attempt::Outcome::done;
      a.tick = e[R::tick].number();
      a.holder.host = e[R::host].text();
      a.tick_at = e[R::at].number();
      a.own_tick = e[R::own].number();
      if (a.tick_at > 0 && e[R::now].number() >= a.tick_at) a.held_for = util::Millis(e[R::now].number() - a.tick_at);
      return a;
    }
    case Answer::busy: {
      using R = reply::busy;
      if (e.size() < R::size) unexpected(name, "malformed answer to the acquire script");
      a.outcome = Attempt::Outcome::busy;
      a.ttl_left = ttl_of(e[R::pttl]);
      read_holder<R>(e, R::since, e[R::now].number(), a);
      a.queue_length = static_cast<int>(e[R::queued].number());
      a.lingering = e[R::lingering].number() == 1;
      if (int64_t tick = e[R::overrun].number(); tick > 0) a.overrun = tick;
      return a;
    }
    case Answer::again: break;
  }
  unexpected(name, "unknown answer to a lock script");
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
  std::vector<std::string> args = acquire_call(contender, queue, false, enclosing_tokens).args();
  // If the answer is lost to a timeout, the server may still run the acquire later (it was only
  // slow): the give-back and the leave, sent right behind it on the same connection (as the
  // acquire went: FCALL, or EVALSHA), then run right after it, instead of the lock (or a place in
  // the queue) staying with a process that gave up. The give-back of a hold never used is
  // "returned" in the history; one the acquire did not take is a retry's, never "lost".
  redis::Undo undo = [&] {
    Ending never_used;
    never_used.retry = true;
    std::vector<redis::ScriptCall> calls;
    calls.reserve(2);
    calls.push_back({&scripts::k_release, keys, timing.script_args(release_call(contender.token, never_used).args())});
    calls.push_back(
        {&scripts::k_cancel, keys, timing.script_args(call::cancel{.token = contender.token, .reason = ""}.args())});
    return calls;
  };
  // Dead waiters at the head are dropped a budget at a time: call again until there is an answer.
  for (int round = 0;; ++round) {
    auto sent_at = util::BootClock::now();
    ScriptReply r = run_script(node, name, timing, scripts::k_acquire, contender.id(), args, undo);
    if (answer<call::acquire>(r) == call::acquire::Answer::again && round < 10'000) continue;
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
  call::wait request =
      wait_call(contender, contender.preempt ? std::string() : std::to_string(timing.far_lease().count()));
  if (last.rejoin_waited && !last.arrival.empty()) {
    request.arrival = last.arrival;
    request.waited = std::to_string(last.rejoin_waited->count());
  }
  std::vector<std::string> args = request.args();
  for (int round = 0;; ++round) {
    auto sent_at = util::BootClock::now();
    ScriptReply r = run_script(node, name, timing, scripts::k_wait, contender.id(), args);
    if (answer<call::wait>(r) == call::wait::Answer::again && round < 10'000) continue;
    Attempt a = read_attempt(r, name, 0);
    a.sent_at = sent_at;
    a.far = a.outcome == Attempt::Outcome::queued && a.position > 1 && !contender.preempt;
    return a;
  }
}

}  // namespace

Attempt wait_turn(Node& node, const LockName& name, const Timing& timing, const Contender& contender,
                  const Attempt& last, util::Millis heartbeat, bool fresh) {
  if (heartbeat.count() <= 0) return full_step(node, name, timing, contender, last);
  redis::Command blpop{"BLPOP", name.mailbox(contender.id())};
  for (const std::string& id : last.watch) {
    if (id != contender.id()) blpop.push_back(name.mailbox(id));
  }
  blpop.push_back(fmt::format("{}.{:03}", heartbeat.count() / 1000, heartbeat.count() % 1000));
  // A waiter that is no preemptor (which keeps its request alive at each step) may take the light
  // step at a heartbeat that no push woke (beat.lua): while the view it keeps holds (no waiter's
  // lease can have run out, and it is not the new head of the queue), it only renews the place,
  // with the far lease of a waiter behind others, and the waiter keeps that view. It goes in the
  // BLPOP's pipeline and runs on the server the moment the BLPOP returns, so a heartbeat costs one
  // round trip. It may: it claims nothing, so a waiter stopped meanwhile (^Z, SIGSTOP) keeps at
  // most its place for one more heartbeat. (Woken by a push, the waiter takes the full step
  // whatever the light step found.) The head takes the full step when this heartbeat reaches the
  // end of the holder's lease (the holders' leases are the head's to watch), or when it is a
  // --once-per run (whose full step looks whether its tick ran meanwhile).
  bool head = last.position == 1;
  bool lease_end = head && last.ttl_left && heartbeat >= *last.ttl_left;
  bool light = !fresh && !last.epoch.empty() && !contender.preempt && !lease_end && !(head && contender.once_per);
  std::vector<std::string> beat_keys, beat_args;
  std::vector<redis::Command> commands{blpop};
  if (light) {
    beat_keys = {name.key_of(protocol::Part::leases), name.key_of(protocol::Part::epoch)};
    util::Millis lease = last.position > 1 ? timing.far_lease() : timing.lease;
    beat_args = call::beat{.id = contender.id(),
                           .epoch = last.epoch,
                           .lease = std::to_string(lease.count()),
                           .claim = std::to_string(timing.claim.count())}
                    .args();
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
    if (r.type == Reply::Type::integer && r.integer == static_cast<int64_t>(call::beat::Answer::unchanged)) {
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
      a.light = true;
      return a;
    }
  }
  // The full step (claim a grant, or renew the place) is a request of its own, sent once awake:
  // were it queued behind the BLPOP, a waiter stopped meanwhile would claim a grant for its whole
  // TTL without knowing; this way its grant lapses after the claim window.
  return full_step(node, name, timing, contender, last);
}

void cancel(Node& node, const LockName& name, const Timing& timing, const std::string& token, bool timed_out) {
  ScriptReply r = run_script(node, name, timing, scripts::k_cancel, id_of(token),
                             call::cancel{.token = token, .reason = timed_out ? "t" : ""}.args());
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

std::string_view outcome_word(HoldOutcome outcome) {
  namespace word = protocol::outcome;
  switch (outcome) {
    case HoldOutcome::none: return "";
    case HoldOutcome::success: return word::success;
    case HoldOutcome::failed: return word::failed;
    case HoldOutcome::max_hold: return word::max_hold;
    case HoldOutcome::preempted: return word::preempted;
    case HoldOutcome::guard_killed: return word::guard_killed;
    case HoldOutcome::not_owned: return word::not_owned;
    case HoldOutcome::renewals_failed: return word::renewals_failed;
    case HoldOutcome::deadline: return word::deadline;
    case HoldOutcome::restarted: return word::restarted;
  }
  return "";
}

bool is_loss(HoldOutcome outcome) {
  return outcome == HoldOutcome::not_owned || outcome == HoldOutcome::renewals_failed ||
         outcome == HoldOutcome::deadline || outcome == HoldOutcome::restarted;
}

call::release release_call(const std::string& token, const Ending& ending) {
  std::string used;
  if (ending.used) used = ending.linger ? std::to_string(std::max<int64_t>(ending.linger->count(), 0)) : "h";
  return {.token = token,
          .exit = ending.exit_status,
          .who = ending.holder,
          .fence = ending.fence ? std::to_string(ending.fence) : "",
          .used = used,
          .retry = ending.retry ? "1" : "",
          .outcome = std::string(outcome_word(ending.outcome)),
          .measured = ending.held ? std::to_string(std::max<int64_t>(ending.held->count(), 0)) : ""};
}

bool release(Node& node, const LockName& name, const Timing& timing, const std::string& token, const Ending& ending) {
  ScriptReply r = run_script(node, name, timing, scripts::k_release, id_of(token), release_call(token, ending).args());
  finish_work(node, name, timing, r.more);
  return answer<call::release>(r) == call::release::Answer::released;
}

call::extend extend_call(const std::string& token, std::optional<util::Millis> ttl, const ExtendNote& note) {
  // The default TTL is extend.lua's fallback for a lease that recorded none.
  return {.token = token,
          .ttl = ttl ? std::to_string(ttl->count()) : std::string(),
          .default_ttl = std::to_string(k_default_ttl.count()),
          .keeper = note.keeper ? std::to_string(note.keeper->keeper) : std::string(),
          .watched = note.keeper ? std::to_string(note.keeper->watched) : std::string(),
          .tick_ran = note.tick_ran ? "1" : ""};
}

std::optional<Extension> extend(Node& node, const LockName& name, const Timing& timing, const std::string& token,
                                std::optional<util::Millis> ttl, const ExtendNote& note) {
  ScriptReply r = run_script(node, name, timing, scripts::k_extend, id_of(token), extend_call(token, ttl, note).args());
  using R = reply::extended;
  if (answer<call::extend>(r) == call::extend::Answer::not_held) return std::nullopt;
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
    ScriptReply r =
        run_script(node, name, timing, scripts::k_force_release, "0000000000000000", call::force_release{}.args());
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
        out.holder.cmd = value;
      else if (field == info::fence)
        out.fence = fields[i + 1].number();
    }
    if (!r.more) break;
  }
  return out;
}

}  // namespace rlock::lock
