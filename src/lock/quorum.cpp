#include "quorum.hpp"

#include "exit_code.hpp"
#include "lock/protocol.hpp"
#include "lock/scripts.hpp"
#include "lock/validity.hpp"
#include "util/duration.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>

namespace rlock::lock {

namespace {

using redis::Reply;
namespace reply = protocol::reply;
namespace call = protocol::call;

// "NAME: why", without NAME twice when the reason names the master already.
std::string named(const std::string& name, const std::string& why) {
  if (why.compare(0, name.size(), name) == 0) return why;
  return fmt::format("{}: {}", name, why);
}

// A master's script reply, or nullopt after adding why it has none to failures. The errors that
// are the caller's (a limit or kind that disagrees, a shared hold upgraded) end the command.
std::optional<ScriptReply> usable(const NodeAnswer& a, const std::string& master, const LockName& name,
                                  std::vector<std::string>& failures) {
  if (a.error || !a.reply) {
    failures.push_back(named(master, a.error ? a.error->what() : "no answer"));
    return std::nullopt;
  }
  try {
    return read_script_reply(*a.reply, name);
  } catch (const TransientError& e) {
    failures.push_back(named(master, e.what()));
  } catch (const Error& e) {
    if (e.exit_code() == exit_code::k_usage || a.reply->error_code() == "RLOCKLIMIT") throw;
    failures.push_back(named(master, e.what()));
  }
  return std::nullopt;
}

// The same arguments for each of n masters, after the timing's configuration.
std::vector<std::vector<std::string>> with_config(const Timing& timing, const std::vector<std::string>& args,
                                                  size_t n) {
  return std::vector<std::vector<std::string>>(n, timing.script_args(args));
}

}  // namespace

[[noreturn]] void no_majority(const std::vector<std::string>& failures, size_t masters, size_t majority) {
  std::string list;
  for (const std::string& f : failures) {
    if (!list.empty()) list += "; ";
    list += f;
  }
  throw Error(exit_code::k_unavailable,
              fmt::format("no majority of the {} Redis masters answered ({} needed): {}", masters, majority, list));
}

Quorum::Quorum(NodeSet& nodes, Timing timing, Now now) : m_nodes(nodes), m_timing(timing), m_now(std::move(now)) {}

std::optional<std::string> Quorum::discount_young(size_t i, const std::optional<MasterIdentity>& id,
                                                  util::Millis ttl) const {
  if (!id || !id->uptime_s || id->persistent || *id->uptime_s * 1000 >= ttl.count()) return std::nullopt;
  return fmt::format(
      "{}: started {}s ago, less than the TTL ({}), without appendonly: it may have lost a lock that "
      "another holder still has, so it counts only once it has run a TTL",
      m_nodes.name(i), *id->uptime_s, util::format_duration(ttl));
}

std::optional<std::string> Quorum::discount_restarted(size_t i) const {
  if (i >= m_run_ids.size() || m_run_ids[i].empty()) return std::nullopt;
  std::optional<MasterIdentity> id = m_nodes.identity(i);
  if (!id || id->run_id.empty() || id->run_id == m_run_ids[i]) return std::nullopt;
  return fmt::format(
      "{}: restarted since the lock was taken (its run_id changed): it may have lost it, so it does "
      "not count for this hold",
      m_nodes.name(i));
}

void Quorum::refuse_duplicates(const std::vector<std::optional<MasterIdentity>>& ids, const LockName& name,
                               const std::string& token) {
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::optional<MasterIdentity>& id = ids[i];
    if (!id || id->run_id.empty()) continue;
    auto [it, added] = seen.try_emplace(id->run_id, i);
    if (added) continue;
    release(name, token, {}, true);
    throw Error(exit_code::k_config,
                fmt::format("{} and {} are one server (run_id {}): a Redlock quorum needs independent masters, each "
                            "named once",
                            m_nodes.name(it->second), m_nodes.name(i), util::printable(id->run_id)));
  }
}

util::Millis Quorum::validity(util::BootClock::time_point sent_at, util::Millis ttl) const {
  auto elapsed = std::chrono::duration_cast<util::Millis>(m_now() - sent_at);
  return ttl - elapsed - validity::drift(ttl);
}

// What phase 1 of an acquisition found, master by master.
struct Quorum::Votes {
  std::vector<unsigned char> took;  // the masters that granted (std::vector<bool>'s [] trips -Wnull-dereference)
  size_t answered = 0, granted = 0, young = 0;
  int64_t highest = 0;                    // the largest fence a granting master handed out
  int64_t lowest = INT64_MAX;             // and the smallest
  std::map<std::string, size_t> holders;  // who holds it where we were refused: host, pid, command
  std::map<int64_t, size_t> reentered;    // re-entry: fence -> masters
  size_t reentered_index = 0;
  size_t done = 0;  // --once-per: masters where the tick was run
  Attempt tick;     // the first of them
};

Quorum::Acquisition Quorum::acquire(const LockName& name, const Contender& contender,
                                    const std::vector<std::string>& enclosing) {
  const size_t n = m_nodes.size();
  std::vector<std::string> keys = name.script_keys(contender.id());
  Acquisition out;
  m_nodes.prepare_acquisition();
  auto sent_at = m_now();
  std::vector<NodeAnswer> answers = phase1(name, contender, enclosing, keys);
  // What each master said of itself, read once (INFO, with its connection's greeting).
  std::vector<std::optional<MasterIdentity>> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = m_nodes.identity(i);
  refuse_duplicates(ids, name, contender.token);
  Votes votes = count(answers, ids, name, contender.ttl, out);

  out.granted.assign(votes.took.begin(), votes.took.end());
  for (const auto& [fence, count] : votes.reentered) {
    if (count >= majority()) {
      out.attempt.outcome = Attempt::Outcome::reentered;
      out.attempt.fence = fence;
      out.attempt.enclosing = votes.reentered_index;
      out.attempt.sent_at = sent_at;
      return out;
    }
  }
  if (votes.granted >= majority() &&
      merge_fence(name, keys, contender, votes.highest, votes.lowest == votes.highest, sent_at, out)) {
    m_run_ids.assign(n, std::string());
    for (size_t i = 0; i < n; ++i) {
      if (ids[i]) m_run_ids[i] = ids[i]->run_id;
    }
    out.attempt.outcome = Attempt::Outcome::acquired;
    out.attempt.fence = votes.highest;
    out.attempt.sent_at = sent_at;
    return out;
  }
  give_back(name, contender.token, votes, out);
  return out;
}

std::vector<NodeAnswer> Quorum::phase1(const LockName& name, const Contender& contender,
                                       const std::vector<std::string>& enclosing,
                                       const std::vector<std::string>& keys) {
  const size_t n = m_nodes.size();
  // Phase 1 records nothing of the acquisition in the masters' histories: phase 2 does, once a
  // majority granted it.
  std::vector<NodeAnswer> answers = m_nodes.eval_all(
      scripts::k_acquire, keys, with_config(m_timing, acquire_call(contender, false, true, enclosing).args(), n),
      std::vector(n, true));
  for (size_t i = 0; i < n; ++i) {
    if (answers[i].error && answers[i].error->exit_code() == exit_code::k_config) {
      // A member that cannot be one (a Cluster node): nothing may stay taken on the others.
      release(name, contender.token, {}, true);
      throw *answers[i].error;
    }
  }
  return answers;
}

Quorum::Votes Quorum::count(const std::vector<NodeAnswer>& answers,
                            const std::vector<std::optional<MasterIdentity>>& ids, const LockName& name,
                            util::Millis ttl, Acquisition& out) const {
  const size_t n = m_nodes.size();
  Votes votes;
  votes.took.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::optional<ScriptReply> reply = usable(answers[i], m_nodes.name(i), name, out.failures);
    if (!reply) continue;
    const auto& e = reply->payload;
    ++votes.answered;
    using Answer = call::acquire::Answer;
    switch (answer<call::acquire>(*reply)) {
      case Answer::taken:
        votes.took[i] = 1;
        votes.highest = std::max(votes.highest, e.size() > reply::taken::fence ? e[reply::taken::fence].number() : 0);
        votes.lowest = std::min(votes.lowest, e.size() > reply::taken::fence ? e[reply::taken::fence].number() : 0);
        if (std::optional<std::string> why = discount_young(i, ids[i], ttl)) {
          out.failures.push_back(*why);
          ++votes.young;
        } else {
          ++votes.granted;
        }
        break;
      case Answer::reentered:
        if (e.size() >= reply::reentered::size) {
          ++votes.reentered[e[reply::reentered::fence].number()];
          votes.reentered_index = static_cast<size_t>(e[reply::reentered::enclosing].number() - 1);
        }
        break;
      case Answer::busy: refused(*reply, name, votes, out.attempt); break;
      case Answer::tick_done:
        if (++votes.done == 1) votes.tick = read_attempt(*reply, name, 0);
        break;
      case Answer::waiting:
      case Answer::again: break;
    }
  }
  return votes;
}

void Quorum::refused(const ScriptReply& reply, const LockName& name, Votes& votes, Attempt& attempt) {
  if (reply.payload.size() < reply::busy::size) return;
  // Read as one server's refusal is (lease.cpp), of which the first master's holder is kept.
  Attempt busy = read_attempt(reply, name, 0);
  const Holder& h = busy.holder;
  // One holder is its host, pid and command: not its since, which is each master's own clock (one
  // holder's writes land in different milliseconds on different masters).
  ++votes.holders[h.host + '\0' + h.pid + '\0' + h.cmd];
  if (!attempt.holder.host.empty()) return;
  attempt.holder = busy.holder;
  attempt.ttl_left = busy.ttl_left;
  attempt.lingering = busy.lingering;
  attempt.overrun = busy.overrun;
}

bool Quorum::merge_fence(const LockName& name, const std::vector<std::string>& keys, const Contender& contender,
                         int64_t highest, bool unanimous, util::BootClock::time_point sent_at, Acquisition& out) {
  const size_t n = m_nodes.size();
  if (validity(sent_at, contender.ttl) <= util::Millis(0)) {
    out.failures.push_back("a majority granted the lock too late: its validity was used up");
    return false;
  }
  // Phase 2: the fence the quorum agreed on, written back to the masters that granted.
  std::vector<std::vector<std::string>> args =
      with_config(m_timing,
                  call::merge{.token = contender.token,
                              .fence = std::to_string(highest),
                              .ttl = std::to_string(contender.ttl.count()),
                              .rejoin = "0",
                              .min_hold = std::to_string(contender.min_hold.count())}
                      .args(),
                  n);
  if (unanimous && contender.min_hold.count() <= 0) {
    // Every granting master handed out T itself: its counter is T already, on a majority, set
    // while it held the lock, which is all that the fence's proof asks of phase 2. The write-back
    // then changes no counter; it still records the acquisition in each master's history, but
    // nothing waits for it (its answers are read before the next request).
    m_nodes.send_all(scripts::k_merge, keys, args, out.granted);
    return true;
  }
  std::vector<NodeAnswer> acks = m_nodes.eval_all(scripts::k_merge, keys, args, out.granted);
  size_t merged = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!out.granted[i] || !acks[i].reply) continue;
    try {
      auto merge = answer<call::merge>(read_script_reply(*acks[i].reply, name));
      if (merge == call::merge::Answer::merged || merge == call::merge::Answer::rejoined) ++merged;
    } catch (const Error&) {
    }
  }
  if (merged >= majority() && validity(sent_at, contender.ttl) > util::Millis(0)) return true;
  out.failures.push_back(fmt::format("only {} of {} masters took the fence within the validity", merged, n));
  return false;
}

void Quorum::give_back(const LockName& name, const std::string& token, const Votes& votes, Acquisition& out) {
  // Failed: give back everything, on every master, those that did not answer included (they may
  // have taken it after all). The caller retries after a random delay, never blocked by this.
  release(name, token, {}, true);
  out.attempt.outcome = Attempt::Outcome::busy;
  // Young masters answered, but their answer does not count: without enough others, that is an
  // outage (69), never "busy".
  out.unavailable = votes.answered - votes.young < majority();
  for (const auto& [who, count] : votes.holders) out.majority_busy = out.majority_busy || count >= majority();
  out.attempt.queue_length = 0;
  // The tick ran, as a majority says: given back everywhere else.
  if (votes.done >= majority()) out.attempt = votes.tick;
}

Quorum::Extended Quorum::extend(const LockName& name, const std::string& token, std::optional<util::Millis> ttl,
                                util::Millis lease_ttl, int64_t fence, const ExtendNote& note) {
  const size_t n = m_nodes.size();
  std::vector<std::string> keys = name.script_keys(id_of(token));
  std::vector<std::string> args = extend_call(token, ttl, note).args();
  auto sent_at = m_now();
  std::vector<NodeAnswer> answers =
      m_nodes.eval_all(scripts::k_extend, keys, with_config(m_timing, args, n), std::vector(n, true));
  Extended out;
  size_t extended = 0, lost = 0;
  std::vector<bool> missing(n, false);
  std::optional<util::Millis> least_left;
  util::Millis new_ttl = ttl.value_or(lease_ttl);
  for (size_t i = 0; i < n; ++i) {
    std::optional<ScriptReply> reply = usable(answers[i], m_nodes.name(i), name, out.failures);
    if (!reply) continue;
    if (std::optional<std::string> restarted = discount_restarted(i)) {
      out.failures.push_back(*restarted);
      // Set again with the fence, but not counted.
      missing[i] = answer<call::extend>(*reply) == call::extend::Answer::not_held;
      continue;
    }
    using R = reply::extended;
    const auto& e = reply->payload;
    if (answer<call::extend>(*reply) == call::extend::Answer::not_held) {
      ++lost;
      missing[i] = true;
    } else if (e.size() > R::ttl) {
      ++extended;
      new_ttl = util::Millis(e[R::ttl].number());
      if (e[R::pttl_before].type == Reply::Type::integer && e[R::pttl_before].integer >= 0) {
        util::Millis left(e[R::pttl_before].integer);
        least_left = least_left ? std::min(*least_left, left) : left;
      }
    }
  }
  // Counted only when a majority answered within the validity of the lease they extend.
  if (extended >= majority() && validity(sent_at, new_ttl) > util::Millis(0)) {
    out.outcome = Renewal::renewed;
    out.extension = Extension{least_left, new_ttl, std::nullopt};
    // A master that lost the key (it restarted) gets it back, but only with the fence merge, so
    // that no later holder's INCR there can fall below this hold's fence.
    if (fence > 0 && std::find(missing.begin(), missing.end(), true) != missing.end()) {
      m_nodes.eval_all(scripts::k_merge, keys,
                       with_config(m_timing.quiet(),
                                   call::merge{.token = token,
                                               .fence = std::to_string(fence),
                                               .ttl = std::to_string(new_ttl.count()),
                                               .rejoin = "1",
                                               .min_hold = ""}
                                       .args(),
                                   n),
                       missing);
    }
  } else if (lost >= majority()) {
    out.outcome = Renewal::lost;
  }
  return out;
}

Quorum::Releases Quorum::release(const LockName& name, const std::string& token, const Ending& ending, bool quiet) {
  const size_t n = m_nodes.size();
  const Timing timing = quiet ? m_timing.quiet() : m_timing;
  const std::vector<std::string> keys = name.script_keys(id_of(token));
  const std::vector<std::vector<std::string>> args = with_config(timing, release_call(token, ending).args(), n);
  if (quiet) {
    // The leftovers of an attempt that failed: every answer read, as the retry that follows uses
    // the same connections.
    return tally_releases(m_nodes.eval_all(scripts::k_release, keys, args, std::vector(n, true)), name);
  }
  // The release goes to every master, and every master runs it; what it proves needs only the
  // answers that decide (a majority released, or a majority did not hold it): the masters still
  // answering then are not waited for.
  NodeSet::Decided decided = [&](const std::vector<NodeAnswer>& so_far) {
    try {
      Releases r = tally_releases(so_far, name);
      return r.held >= majority() || r.answered - r.discounted - r.held >= majority();
    } catch (const Error&) {
      return false;  // thrown again once every answer is in
    }
  };
  return tally_releases(m_nodes.eval_until(scripts::k_release, keys, args, std::vector(n, true), decided), name);
}

Quorum::Releases Quorum::tally_releases(const std::vector<NodeAnswer>& answers, const LockName& name) const {
  Releases out;
  for (size_t i = 0; i < answers.size(); ++i) {
    if (!answers[i].reply && !answers[i].error) continue;  // not waited for
    std::optional<ScriptReply> reply = usable(answers[i], m_nodes.name(i), name, out.failures);
    if (!reply) continue;
    ++out.answered;
    if (std::optional<std::string> restarted = discount_restarted(i)) {
      out.failures.push_back(*restarted);
      ++out.discounted;
      continue;
    }
    if (answer<call::release>(*reply) == call::release::Answer::released) ++out.held;
  }
  return out;
}

Released Quorum::verdict(const Releases& r) const {
  if (r.held >= majority()) return Released::released;
  if (r.answered - r.discounted - r.held >= majority()) return Released::not_held;
  if (r.answered < majority()) no_majority(r.failures, m_nodes.size(), majority());
  return Released::unknown;
}

LockState Quorum::merge_views(const LockName& name, const std::vector<std::optional<LockState>>& states,
                              const std::vector<std::string>& ids, const std::vector<std::string>& failures) const {
  const size_t n = m_nodes.size();
  std::vector<MasterView> views(n);
  std::map<std::string, size_t> votes;  // holder id ("" for free) -> masters
  size_t answered = 0;
  for (size_t i = 0; i < n; ++i) {
    views[i].url = m_nodes.name(i);
    if (!states[i]) {
      views[i].error = failures[i];
      continue;
    }
    ++answered;
    ++votes[states[i]->held ? ids[i] : std::string()];
  }
  if (answered < majority()) {
    std::vector<std::string> why;
    for (const MasterView& v : views) {
      if (!v.error.empty()) why.push_back(v.error);
    }
    no_majority(why, n, majority());
  }
  std::string best;
  size_t best_votes = 0;
  for (const auto& [id, count] : votes) {
    if (count > best_votes) best = id, best_votes = count;
  }
  LockState out;
  bool majority_view = best_votes >= majority();
  // The holder as the agreeing masters show it. A master that restarted and got the lock back at
  // a renewal knows only the token and the fence, not who holds it or since when: the first
  // agreeing master with the holder's details is taken.
  auto complete = [&](size_t i) {
    return !states[i]->holders.empty() && !states[i]->holders.front().holder.host.empty();
  };
  std::optional<size_t> chosen;
  for (size_t i = 0; i < n; ++i) {
    if (!states[i]) continue;
    views[i].held = states[i]->held;
    if (!states[i]->holders.empty()) views[i].holder = states[i]->holders.front().holder;
    views[i].agrees = majority_view && (states[i]->held ? ids[i] : std::string()) == best;
    if (views[i].agrees && (!chosen || (!complete(*chosen) && complete(i)))) chosen = i;
  }
  if (chosen) out = *states[*chosen];
  for (size_t i = 0; i < n; ++i) {
    if (!states[i]) continue;
    out.fence = std::max(out.fence.value_or(0), states[i]->fence.value_or(0));
    if (views[i].agrees && views[i].holder.host.empty() && !out.holders.empty()) {
      views[i].holder = out.holders.front().holder;
    }
  }
  if (!majority_view) {
    // Nobody holds it on a majority: it is free, whatever minorities show.
    out.held = false;
    out.holders.clear();
    out.holder_count = 0;
  }
  out.key = name.key;
  out.masters = views;
  out.agreeing = 0;
  for (const MasterView& v : views) out.agreeing += v.agrees;
  return out;
}

}  // namespace rlock::lock
