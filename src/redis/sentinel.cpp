// The Client through Redis Sentinel: the master the majority of the sentinels names, and the
// check that the connected server is still that master (redis+sentinel:// URLs).
#include "client.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

namespace rlock::redis {

namespace {

// Whether a server's answer to ROLE says it is a master.
bool says_master(const Reply& role) {
  return role.type == Reply::Type::array && !role.elements.empty() && role.elements[0].str == "master";
}

}  // namespace

std::optional<std::pair<std::string, int>> Client::master_by_majority(std::string& why, Connection* also,
                                                                      std::optional<Outcome>* role) {
  if (m_sentinels.empty()) {
    for (const Endpoint& s : m_url.sentinels) {
      Endpoint e = s;
      // The sentinels' own credentials (sentinel requirepass or an ACL user), not the master's.
      e.user = m_url.sentinel_user;
      e.password = m_url.sentinel_password;
      e.db = 0;
      e.tls = false;
      // Kept open (and resolved once): run asks before every renewal, inside its deadline.
      m_sentinels.push_back(std::make_unique<Connection>(e, m_timeouts));
      configure(*m_sentinels.back());
    }
  }
  std::vector<Connection*> all;
  for (auto& c : m_sentinels) all.push_back(c.get());
  std::vector<std::vector<Command>> ask(all.size(), {{"SENTINEL", "get-master-addr-by-name", m_url.master}});
  const size_t sentinels = all.size();
  if (also) {
    all.push_back(also);
    ask.push_back({{"ROLE"}});
  }
  size_t majority = m_url.sentinels.size() / 2 + 1;
  // Done as soon as a majority names the same master (and the server asked for its ROLE has
  // answered): a paused sentinel costs nothing then.
  auto agreed = [&](const std::vector<std::optional<Outcome>>& so_far) {
    if (also && !so_far.back()) return false;
    std::map<std::string, size_t> same;
    for (size_t i = 0; i < sentinels; ++i) {
      const auto& o = so_far[i];
      if (!o || o->error || o->replies.empty()) continue;
      const Reply& r = o->replies.front();
      if (r.type != Reply::Type::array || r.elements.size() != 2) continue;
      if (++same[r.elements[0].str + ":" + r.elements[1].str] >= majority) return true;
    }
    return false;
  };
  std::vector<Outcome> answers = exchange_all(all, ask, m_interrupt_fd, m_on_interrupt, agreed);
  if (also && role) *role = std::move(answers.back());
  std::map<std::pair<std::string, int>, size_t> votes;
  std::string last = "no sentinel answered";
  for (size_t i = 0; i < sentinels; ++i) {
    const Endpoint& s = all[i]->endpoint();
    if (answers[i].error) {
      // A refused login is a configuration problem, not a partition: say so at once.
      if (answers[i].error->exit_code() == exit_code::k_permission) {
        throw Error(exit_code::k_permission,
                    fmt::format("{} (the sentinels' own password: --sentinel-password-file, RLOCK_SENTINEL_PASSWORD, "
                                "--sentinel-user)",
                                answers[i].error->what()));
      }
      last = answers[i].error->what();
      continue;
    }
    const Reply& r = answers[i].replies.front();
    long long port = 0;
    if (r.is_error()) {
      last = fmt::format("sentinel {}:{} answered: {}", s.host, s.port, r.str);
    } else if (r.type != Reply::Type::array || r.elements.size() != 2) {
      last = fmt::format("sentinel {}:{} knows no master named '{}'", s.host, s.port, m_url.master);
    } else if (!util::parse_int(r.elements[1].str, 1, 65535, port)) {
      last = fmt::format("sentinel {}:{} gave a bad port", s.host, s.port);
    } else {
      log::verbose("sentinel {}:{} names {}:{} as master {}", s.host, s.port, r.elements[0].str, port, m_url.master);
      ++votes[{r.elements[0].str, static_cast<int>(port)}];
    }
  }
  size_t best = 0;
  for (const auto& [address, count] : votes) {
    if (count >= majority) return address;
    best = std::max(best, count);
  }
  why = fmt::format("only {} of the {} sentinels agree on a master (a majority, {}, must); last problem: {}", best,
                    m_url.sentinels.size(), majority, last);
  return std::nullopt;
}

void Client::resolve_master() {
  std::string last = "no sentinel answered";
  // Sentinels may briefly name a server that is not master yet (mid-failover): ask a few times.
  for (int round = 0; round < 3; ++round) {
    auto address = master_by_majority(last);
    if (!address) break;
    Connection& master = node(address->first, address->second);
    try {
      Reply role = master.call({"ROLE"});
      if (says_master(role)) {
        m_current = &master;
        return;
      }
      last = fmt::format("{} is not a master (yet): a failover may be in progress", master.endpoint().display());
      master.close();
    } catch (const Error& e) {
      if (e.exit_code() != exit_code::k_unavailable) throw;
      last = e.what();
    }
  }
  throw Error(exit_code::k_unavailable, fmt::format("{}: no master found: {}", m_url.display(), last));
}

bool Client::confirm_master(bool* moved) {
  if (m_url.kind != Url::Kind::sentinel) return true;
  std::string why;
  auto address = master_by_majority(why);
  if (!address) {
    log::verbose("{}: the master is not confirmed: {}", m_url.display(), why);
    return false;
  }
  if (m_current && m_current->endpoint().host == address->first && m_current->endpoint().port == address->second) {
    return true;
  }
  Connection& master = node(address->first, address->second);
  log::verbose("a majority of the sentinels now names {} as master {}: following the failover",
               master.endpoint().display(), m_url.master);
  if (moved && m_current) *moved = true;
  m_current = &master;
  return true;
}

bool Client::confirm_current_master(std::string& why) {
  if (m_url.kind != Url::Kind::sentinel) return true;
  if (!m_current) {
    resolve_master();  // the majority and ROLE, or Error 69
    return true;
  }
  Connection& was = *m_current;
  std::optional<Outcome> role;
  auto address = master_by_majority(why, &was, &role);
  if (!address) return false;
  if (was.endpoint().host != address->first || was.endpoint().port != address->second) {
    why = fmt::format("a majority of the sentinels names {}:{} as master {}, not {}", address->first, address->second,
                      m_url.master, was.endpoint().display());
    return false;
  }
  if (!role || role->error || role->replies.empty() || !says_master(role->replies.front())) {
    why = role && role->error ? std::string(role->error->what())
                              : fmt::format("{} is not a master (any more)", was.endpoint().display());
    return false;
  }
  return true;
}

}  // namespace rlock::redis
