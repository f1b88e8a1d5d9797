#include "quorum.hpp"

#include "exit_code.hpp"
#include "lock/scripts.hpp"
#include "lock/validity.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>

namespace rlock::lock {

namespace {

using redis::Reply;

int64_t number_of(const Reply& r) {
  if (r.type == Reply::Type::integer) return r.integer;
  long long v = 0;
  return util::parse_int(r.str, INT64_MIN, INT64_MAX, v) ? v : 0;
}

std::string text_of(const Reply& r) {
  if (r.type == Reply::Type::integer) return std::to_string(r.integer);
  return r.str;
}

const char* mode_code(Mode m) {
  switch (m) {
    case Mode::shared: return "s";
    case Mode::semaphore: return "n";
    default: return "x";
  }
}

// A script's error reply on one master as a failure of that master, except the errors that are
// the caller's (a limit or kind that disagrees, a shared hold upgraded): those end the command.
std::optional<Error> failure_of(const Reply& r, const LockName& name) {
  if (!r.is_error()) return std::nullopt;
  try {
    check_reply(r, name);
  } catch (const TransientError& e) {
    return Error(e.exit_code(), e.what());
  } catch (const Error& e) {
    if (e.exit_code() == exit_code::k_usage) throw;
    if (r.error_code() == "RLOCKLIMIT") throw;
    return e;
  }
  return std::nullopt;
}

// "NAME: why", without NAME twice when the reason names the master already.
std::string named(const std::string& name, const std::string& why) {
  if (why.compare(0, name.size(), name) == 0) return why;
  return fmt::format("{}: {}", name, why);
}

// A master's reply, or nullptr after adding why it has none to failures.
const Reply* usable(const NodeAnswer& a, const std::string& master, const LockName& name,
                    std::vector<std::string>& failures) {
  std::optional<Error> failure = a.error;
  if (!failure && a.reply) failure = failure_of(*a.reply, name);
  if (failure || !a.reply) {
    failures.push_back(named(master, failure ? failure->what() : "no answer"));
    return nullptr;
  }
  return &*a.reply;
}

}  // namespace

Quorum::Quorum(NodeSet& nodes, Now now) : m_nodes(nodes), m_now(std::move(now)) {}

util::Millis Quorum::validity(util::BootClock::time_point sent_at, util::Millis ttl) const {
  auto elapsed = std::chrono::duration_cast<util::Millis>(m_now() - sent_at);
  return ttl - elapsed - validity::drift(ttl);
}

Quorum::Acquisition Quorum::acquire(const LockName& name, const Contender& contender,
                                    const std::vector<std::string>& enclosing) {
  const size_t n = m_nodes.size();
  std::vector<std::string> keys = name.script_keys(contender.id());
  std::vector<std::string> args{contender.token,       std::to_string(contender.ttl.count()),
                                contender.holder.host, contender.holder.pid,
                                contender.holder.user, contender.holder.command,
                                mode_code(contender.mode), std::to_string(contender.limit),
                                "0"};
  args.insert(args.end(), enclosing.begin(), enclosing.end());
  Acquisition out;
  std::vector<unsigned char> took(n, 0);  // (std::vector<bool>'s [] trips -Wnull-dereference)
  auto sent_at = m_now();
  std::vector<NodeAnswer> answers = m_nodes.eval_all(scripts::k_acquire, keys, std::vector(n, args), std::vector(n, true));

  for (size_t i = 0; i < n; ++i) {
    if (answers[i].error && answers[i].error->exit_code() == exit_code::k_config) {
      // A member that cannot be one (a Cluster node): nothing may stay taken on the others.
      release(name, contender.token);
      throw *answers[i].error;
    }
  }
  size_t answered = 0, granted = 0;
  int64_t highest = 0;
  std::map<std::string, size_t> holders;  // who holds it where we were refused: host pid since
  std::map<int64_t, size_t> reentered;    // re-entry: fence -> masters
  size_t reentered_index = 0;
  for (size_t i = 0; i < n; ++i) {
    const Reply* reply = usable(answers[i], m_nodes.name(i), name, out.failures);
    if (!reply) continue;
    const Reply& r = *reply;
    if (r.type != Reply::Type::array || r.elements.empty()) {
      out.failures.push_back(fmt::format("{}: malformed answer", m_nodes.name(i)));
      continue;
    }
    ++answered;
    const auto& e = r.elements;
    switch (number_of(e[0])) {
      case 1:
        took[i] = 1;
        ++granted;
        highest = std::max(highest, e.size() > 1 ? number_of(e[1]) : 0);
        break;
      case 2:
        if (e.size() > 3) {
          ++reentered[number_of(e[1])];
          reentered_index = static_cast<size_t>(number_of(e[3]) - 1);
        }
        break;
      case 0:
        if (e.size() >= 6) {
          ++holders[text_of(e[2]) + " " + text_of(e[3]) + " " + text_of(e[5])];
          if (out.attempt.holder.host.empty()) {
            out.attempt.holder = {text_of(e[2]), text_of(e[3]), "", text_of(e[4])};
            out.attempt.ttl_left = e[1].type == Reply::Type::integer && e[1].integer >= 0
                                       ? std::optional<util::Millis>(util::Millis(e[1].integer))
                                       : std::nullopt;
          }
        }
        break;
      default: break;
    }
  }

  out.granted.assign(took.begin(), took.end());
  for (const auto& [fence, count] : reentered) {
    if (count >= majority()) {
      out.attempt.outcome = Attempt::Outcome::reentered;
      out.attempt.fence = fence;
      out.attempt.enclosing = reentered_index;
      out.attempt.sent_at = sent_at;
      return out;
    }
  }

  if (granted >= majority() && validity(sent_at, contender.ttl) > util::Millis(0)) {
    // Phase 2: the fence the quorum agreed on, written back to the masters that granted.
    std::vector<NodeAnswer> acks = m_nodes.eval_all(
        scripts::k_merge, keys,
        std::vector<std::vector<std::string>>(
            n, {contender.token, std::to_string(highest), std::to_string(contender.ttl.count()), "0"}),
        out.granted);
    size_t merged = 0;
    for (size_t i = 0; i < n; ++i) {
      if (out.granted[i] && acks[i].reply && acks[i].reply->type == Reply::Type::integer && acks[i].reply->integer >= 1) {
        ++merged;
      }
    }
    if (merged >= majority() && validity(sent_at, contender.ttl) > util::Millis(0)) {
      out.attempt.outcome = Attempt::Outcome::acquired;
      out.attempt.fence = highest;
      out.attempt.sent_at = sent_at;
      return out;
    }
    out.failures.push_back(fmt::format("only {} of {} masters took the fence within the validity", merged, n));
  } else if (granted >= majority()) {
    out.failures.push_back("a majority granted the lock too late: its validity was used up");
  }

  // Failed: give back everything, on every master, those that did not answer included (they may
  // have taken it after all). The caller retries after a random delay, never blocked by this.
  release(name, contender.token);
  out.attempt.outcome = Attempt::Outcome::busy;
  out.unavailable = answered < majority();
  for (const auto& [who, count] : holders) out.majority_busy = out.majority_busy || count >= majority();
  out.attempt.queue_length = 0;
  return out;
}

Quorum::Extended Quorum::extend(const LockName& name, const std::string& token, std::optional<util::Millis> ttl,
                                util::Millis lease_ttl, int64_t fence, const std::optional<KeeperInfo>& keeper) {
  const size_t n = m_nodes.size();
  std::vector<std::string> keys = name.script_keys(id_of(token));
  std::vector<std::string> args{token, ttl ? std::to_string(ttl->count()) : std::string()};
  if (keeper) {
    args.push_back(std::to_string(keeper->keeper));
    args.push_back(std::to_string(keeper->watched));
  }
  auto sent_at = m_now();
  std::vector<NodeAnswer> answers = m_nodes.eval_all(scripts::k_extend, keys, std::vector(n, args), std::vector(n, true));
  Extended out;
  size_t extended = 0, lost = 0;
  std::vector<bool> missing(n, false);
  std::optional<util::Millis> least_left;
  util::Millis new_ttl = ttl.value_or(lease_ttl);
  for (size_t i = 0; i < n; ++i) {
    const Reply* reply = usable(answers[i], m_nodes.name(i), name, out.failures);
    if (!reply) continue;
    const Reply& r = *reply;
    if (r.type == Reply::Type::integer && r.integer == 0) {
      ++lost;
      missing[i] = true;
    } else if (r.type == Reply::Type::array && r.elements.size() == 2) {
      ++extended;
      new_ttl = util::Millis(number_of(r.elements[1]));
      if (r.elements[0].type == Reply::Type::integer && r.elements[0].integer >= 0) {
        util::Millis left(r.elements[0].integer);
        least_left = least_left ? std::min(*least_left, left) : left;
      }
    }
  }
  // Counted only when a majority answered within the validity of the lease they extend.
  if (extended >= majority() && validity(sent_at, new_ttl) > util::Millis(0)) {
    out.outcome = Renewal::renewed;
    out.extension = Extension{least_left, new_ttl};
    // A master that lost the key (it restarted) gets it back, but only with the fence merge, so
    // that no later holder's INCR there can fall below this hold's fence.
    if (lost > 0 && fence > 0) {
      m_nodes.eval_all(scripts::k_merge, keys,
                       std::vector<std::vector<std::string>>(
                           n, {token, std::to_string(fence), std::to_string(new_ttl.count()), "1"}),
                       missing);
    }
  } else if (lost >= majority()) {
    out.outcome = Renewal::lost;
  }
  return out;
}

Quorum::Released Quorum::release(const LockName& name, const std::string& token) {
  const size_t n = m_nodes.size();
  std::vector<NodeAnswer> answers = m_nodes.eval_all(scripts::k_release, name.script_keys(id_of(token)),
                                                     std::vector<std::vector<std::string>>(n, {token}),
                                                     std::vector(n, true));
  Released out;
  for (size_t i = 0; i < n; ++i) {
    const NodeAnswer& a = answers[i];
    if (a.reply && a.reply->type == Reply::Type::integer) {
      ++out.answered;
      if (a.reply->integer == 1) ++out.held;
    } else {
      out.failures.push_back(named(m_nodes.name(i), a.error ? a.error->what() : "malformed answer"));
    }
  }
  return out;
}

}  // namespace rlock::lock
