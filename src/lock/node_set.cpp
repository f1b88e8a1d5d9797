#include "node_set.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/server.hpp"
#include "log.hpp"

#include <fmt/core.h>

namespace rlock::lock {

ClientNodeSet::ClientNodeSet(const std::vector<redis::Url>& urls, redis::Timeouts per_node,
                             const redis::TlsOptions& tls) {
  for (const redis::Url& url : urls) {
    m_members.push_back(std::make_unique<redis::Client>(url, per_node, tls));
    // Every connection says who it reached: its run_id (one server named twice, a restart),
    // uptime, and whether it is a Cluster node. No round trip of its own.
    m_members.back()->set_greeting(info_identity());
  }
}

void ClientNodeSet::prepare_acquisition() {
  // Also persistence (a young master) and the eviction policy.
  for (auto& m : m_members) m->set_greeting(info_member());
}

const ServerFacts* ClientNodeSet::facts(size_t i) const {
  const std::optional<redis::Reply>& info = m_members[i]->greeting_reply();
  if (!info || info->type != redis::Reply::Type::string) return nullptr;
  m_parsed.resize(m_members.size());
  std::optional<Parsed>& p = m_parsed[i];
  if (!p || p->greeting != info->str) p = Parsed{info->str, parse_info(info->str)};
  return &p->facts;
}

std::optional<MasterIdentity> ClientNodeSet::identity(size_t i) const {
  const ServerFacts* f = facts(i);
  if (!f) return std::nullopt;
  return MasterIdentity{f->run_id, f->uptime_s, f->aof.value_or(false)};
}

void ClientNodeSet::set_interrupt(int fd, std::function<bool()> on_ready) {
  m_interrupt_fd = fd;
  m_on_interrupt = on_ready;
  for (auto& m : m_members) m->set_interrupt(fd, on_ready);
}

void ClientNodeSet::cap_waits(std::optional<redis::Clock::time_point> cap) {
  for (auto& m : m_members) m->cap_waits(cap);
}

ClientNodeSet::~ClientNodeSet() {
  // A request of send_all left under way has gone out whole, as a rule: its master runs it whether
  // or not the answer is read, and its connection is closed behind it (acquire's phase 2 does not
  // hold up its exit). Only a request still being sent is finished first.
  bool sending = false;
  for (redis::Connection* c : m_unsettled) sending = sending || (!c->finished() && !c->request_sent());
  if (!sending) return;
  // The interrupt's descriptor (a command's signalfd) may be closed by now: not watched.
  m_interrupt_fd = -1;
  try {
    settle();
  } catch (const std::exception&) {
  }
}

void ClientNodeSet::settle() {
  if (m_unsettled.empty()) return;
  std::vector<redis::Connection*> under_way;
  under_way.swap(m_unsettled);
  for (redis::Connection* c : under_way) c->renew_deadline();
  std::vector<redis::Outcome> outcomes = redis::finish_all(under_way, m_interrupt_fd, m_on_interrupt);
  for (size_t k = 0; k < outcomes.size(); ++k) {
    if (outcomes[k].error) log::verbose("{}", outcomes[k].error->what());
  }
}

void ClientNodeSet::send_all(const redis::Script& script, const std::vector<std::string>& keys,
                             const std::vector<std::vector<std::string>>& args, const std::vector<bool>& which) {
  settle();
  const size_t n = m_members.size();
  for (size_t i = 0; i < n; ++i) {
    if (which[i] && (!m_members[i]->functions() || script.function.empty())) {
      eval_all(script, keys, args, which);
      return;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!which[i]) continue;
    try {
      redis::Connection& c = m_members[i]->connection();
      c.start(redis::script_commands(script, redis::ScriptWay::fcall, keys, args[i]));
      m_unsettled.push_back(&c);
    } catch (const Error& e) {
      log::verbose("{}", e.what());
    }
  }
}

std::vector<NodeAnswer> ClientNodeSet::eval_all(const redis::Script& script, const std::vector<std::string>& keys,
                                                const std::vector<std::vector<std::string>>& args,
                                                const std::vector<bool>& which) {
  return eval(script, keys, args, which, nullptr);
}

std::vector<NodeAnswer> ClientNodeSet::eval_until(const redis::Script& script, const std::vector<std::string>& keys,
                                                  const std::vector<std::vector<std::string>>& args,
                                                  const std::vector<bool>& which, const Decided& decided) {
  return eval(script, keys, args, which, &decided);
}

NodeAnswer ClientNodeSet::answer_of(size_t i, redis::Reply reply, bool* moved) const {
  NodeAnswer out;
  std::string code = reply.error_code();
  // A Cluster node: it says so in its greeting (INFO), or by redirecting a key it does not own.
  const ServerFacts* facts_i = facts(i);
  if ((facts_i && facts_i->cluster) || code == "MOVED" || code == "ASK" || code == "CLUSTERDOWN") {
    out.error = cluster_member_error(name(i));
  } else if (code == "READONLY") {
    out.error = Error(exit_code::k_unavailable, fmt::format("{}: the server is a read-only replica", name(i)));
    if (moved) *moved = true;
  } else {
    out.reply = std::move(reply);
  }
  return out;
}

std::vector<NodeAnswer> ClientNodeSet::eval(const redis::Script& script, const std::vector<std::string>& keys,
                                            const std::vector<std::vector<std::string>>& args,
                                            const std::vector<bool>& which, const Decided* decided) {
  settle();
  const size_t n = m_members.size();
  std::vector<NodeAnswer> out(n);
  // The connection of each member asked (a Sentinel member's master is looked up now, bounded
  // by the per-node timeout; a member that cannot say fails alone).
  std::vector<size_t> asked;
  std::vector<redis::Connection*> connections;
  for (size_t i = 0; i < n; ++i) {
    if (!which[i]) continue;
    try {
      connections.push_back(&m_members[i]->connection());
      asked.push_back(i);
    } catch (const Error& e) {
      out[i].error = e;
    }
  }
  // FCALL (or EVALSHA) everywhere at once; then, again at once, FUNCTION LOAD and FCALL where the
  // library was missing, EVALSHA where functions were refused, EVAL where the script was not cached.
  std::vector<std::optional<redis::ScriptWay>> way(n);
  for (size_t i : asked) way[i] = redis::first_way(script, m_members[i]->functions());
  for (int round_number = 0; round_number < 4; ++round_number) {
    std::vector<redis::Connection*> round;
    std::vector<size_t> members;
    std::vector<std::vector<redis::Command>> commands;
    for (size_t k = 0; k < asked.size(); ++k) {
      size_t i = asked[k];
      if (!way[i]) continue;
      round.push_back(connections[k]);
      members.push_back(i);
      commands.push_back(redis::script_commands(script, *way[i], keys, args[i]));
    }
    if (round.empty()) break;
    // With `decided`: after each answer, the answers so far (a member whose script must be tried
    // another way still waits) are asked whether they decide; the members still waiting are then
    // not waited for, where each one's request is sure to run: sent in full (request_sent), and
    // by EVAL, or by a function library or script that its connection already ran (an answer
    // asking for another way would be lost unread).
    std::vector<bool> waited(round.size(), true);
    redis::Enough enough;
    if (decided) {
      enough = [&](const std::vector<std::optional<redis::Outcome>>& so_far) {
        std::vector<NodeAnswer> now = out;
        for (size_t k = 0; k < round.size(); ++k) {
          size_t i = members[k];
          now[i] = {};
          if (!so_far[k]) {
            if (!round[k]->request_sent()) return false;
            if (*way[i] != redis::ScriptWay::eval && !round[k]->has_run(redis::code_of(script, *way[i]))) return false;
            continue;
          }
          if (so_far[k]->error) {
            now[i].error = so_far[k]->error;
            continue;
          }
          NodeAnswer a = answer_of(i, so_far[k]->replies.back());
          if (a.error || !redis::next_way(*way[i], so_far[k]->replies)) now[i] = std::move(a);
        }
        if (!(*decided)(now)) return false;
        for (size_t k = 0; k < round.size(); ++k) waited[k] = so_far[k].has_value();
        return true;
      };
    }
    std::vector<redis::Outcome> outcomes = redis::exchange_all(round, commands, m_interrupt_fd, m_on_interrupt, enough);
    for (size_t k = 0; k < round.size(); ++k) {
      size_t i = members[k];
      out[i] = {};
      if (!waited[k]) {
        way[i].reset();  // its answer was not needed: neither reply nor error
        continue;
      }
      redis::ScriptWay way_run = *way[i];
      std::optional<redis::ScriptWay> next;
      if (!outcomes[k].error) next = redis::next_way(*way[i], outcomes[k].replies);
      if (next == redis::ScriptWay::evalsha) {
        log::verbose("{}: running scripts by EVALSHA: {}", name(i), outcomes[k].replies.front().str);
        m_members[i]->set_functions(false);
      }
      way[i] = next;
      if (outcomes[k].error) {
        out[i].error = outcomes[k].error;
        m_members[i]->forget_master();  // a Sentinel master may have moved
        continue;
      }
      if (!next && way_run != redis::ScriptWay::eval && !outcomes[k].replies.back().is_error()) {
        round[k]->ran(redis::code_of(script, way_run));
      }
      bool moved = false;
      out[i] = answer_of(i, std::move(outcomes[k].replies.back()), &moved);
      if (out[i].error) way[i].reset();
      if (moved) m_members[i]->forget_master();
    }
  }
  return out;
}

}  // namespace rlock::lock
