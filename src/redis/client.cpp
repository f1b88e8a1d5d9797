#include "client.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "redis/acl.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

#include <unistd.h>

namespace rlock::redis {

namespace {

// Splits "host:port" (the host may be an IPv6 address) of a MOVED or ASK answer.
bool split_address(const std::string& address, std::string& host, int& port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  long long p = 0;
  if (!util::parse_int(std::string_view(address).substr(colon + 1), 1, 65535, p)) return false;
  host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  port = static_cast<int>(p);
  return true;
}

// The command at the line of the script that an error names ("... @user_script:12." for a
// script, "... @user_function:40." for the library), e.g. "SET".
std::string script_command(const Script& script, const std::string& error) {
  std::string_view source = script.source;
  size_t at = error.find("@user_script:");
  size_t skip = 13;
  if (at == std::string::npos) {
    at = error.find("@user_function:");
    skip = 15;
    source = script.library;
  }
  long long line = 0;
  if (at != std::string::npos) {
    std::string_view rest = std::string_view(error).substr(at + skip);
    util::parse_int(rest.substr(0, rest.find_first_not_of("0123456789")), 1, 100000, line);
  }
  for (long long i = 1; i < line && !source.empty(); ++i) {
    size_t nl = source.find('\n');
    source = nl == std::string_view::npos ? std::string_view() : source.substr(nl + 1);
  }
  std::string_view text = source.substr(0, source.find('\n'));
  size_t call = text.find("redis.call('");
  if (line == 0 || call == std::string_view::npos) return "a command";
  std::string_view name = text.substr(call + 12);
  return std::string(name.substr(0, name.find('\'')));
}

}  // namespace

Client::Client(Url url, Timeouts timeouts, TlsOptions tls)
    : m_url(std::move(url)), m_timeouts(timeouts), m_tls(std::move(tls)) {}

Client::~Client() = default;

void Client::configure(Connection& c) {
  if (m_interrupt_fd >= 0) c.set_interrupt(m_interrupt_fd, m_on_interrupt);
  c.cap_waits(m_cap);
}

void Client::set_greeting(Command command) {
  m_greeting = std::move(command);
  for (auto& [name, c] : m_nodes) c->set_greeting(m_greeting);
}

const std::optional<Reply>& Client::greeting_reply() const {
  static const std::optional<Reply> none;
  if (!m_current) return none;
  return m_current->greeting_reply();
}

void Client::set_interrupt(int fd, std::function<bool()> on_ready) {
  m_interrupt_fd = fd;
  m_on_interrupt = std::move(on_ready);
  for (auto& [name, c] : m_nodes) configure(*c);
  for (auto& c : m_sentinels) configure(*c);
}

void Client::cap_waits(std::optional<Clock::time_point> cap) {
  m_cap = cap;
  for (auto& [name, c] : m_nodes) configure(*c);
  for (auto& c : m_sentinels) configure(*c);
}

void Client::forget_master() {
  if (m_url.kind == Url::Kind::sentinel) {
    m_current = nullptr;
  } else if (m_named_owner) {
    m_current = &node(m_named_owner->first, m_named_owner->second);
    m_named_owner.reset();
  }
}

Connection& Client::node(const std::string& host, int port) {
  Endpoint e = m_url.endpoint;  // user, password, db, TLS
  e.kind = Endpoint::Kind::tcp;
  e.host = host;
  e.port = port;
  std::string name = e.identity();
  auto it = m_nodes.find(name);
  if (it == m_nodes.end()) {
    it = m_nodes.emplace(name, std::make_unique<Connection>(e, m_timeouts, m_tls)).first;
    configure(*it->second);
    it->second->set_greeting(m_greeting);
  }
  return *it->second;
}

Connection& Client::current() {
  if (m_current) return *m_current;
  if (m_url.kind == Url::Kind::sentinel) {
    resolve_master();
    return *m_current;
  }
  auto conn = std::make_unique<Connection>(m_url.endpoint, m_timeouts, m_tls);
  configure(*conn);
  conn->set_greeting(m_greeting);
  m_current = conn.get();
  m_nodes.emplace(m_url.endpoint.identity(), std::move(conn));
  return *m_current;
}

bool Client::pause(util::Millis duration) {
  auto until = Clock::now() + duration;
  if (m_cap && until > *m_cap) return false;
  for (;;) {
    pollfd p{m_interrupt_fd, POLLIN, 0};
    int n = util::poll_until(&p, m_interrupt_fd >= 0 ? 1 : 0, until);
    if (n > 0) {
      if (m_on_interrupt()) return false;
      continue;
    }
    return true;
  }
}

std::vector<Reply> Client::routed(const std::vector<Command>& commands, util::Millis budget, const UndoCommands& undo) {
  bool re_resolved = false;
  int node_changes = 0;
  // TRYAGAIN retries for about --io-timeout, without counting as redirections.
  auto tries_left = std::max<int64_t>(1, m_timeouts.command.count() / 50);
  for (int hop = 0; hop <= k_max_redirects; ++hop) {
    Connection& c = current();
    std::vector<Reply> replies;
    try {
      replies = c.pipeline(commands, undo, budget);
    } catch (const Error& e) {
      if (e.exit_code() != exit_code::k_unavailable) throw;
      // The master may have moved: ask the sentinels once more before giving up.
      if (m_url.kind == Url::Kind::sentinel && !re_resolved) {
        log::verbose("{}; asking the sentinels again", e.what());
        m_current = nullptr;
        re_resolved = true;
        --hop;
        continue;
      }
      // A failed Cluster master: another node knows where its slots went (to a promoted replica).
      if (node_changes < 3 && try_other_node(e.what())) {
        ++node_changes;
        --hop;
        continue;
      }
      throw;
    }
    bool try_again = false;
    for (const Reply& r : replies) try_again = try_again || r.error_code() == "TRYAGAIN";
    if (try_again && tries_left-- > 0) {
      // A slot mid-migration: the keys are split between two nodes for a moment.
      log::verbose("{}: slot being migrated (TRYAGAIN); retrying", c.endpoint().display());
      if (!pause(util::Millis(50))) return replies;  // no time left under the cap: the caller sees TRYAGAIN
      --hop;
      continue;
    }
    const Reply* redirect = nullptr;
    for (const Reply& r : replies) {
      std::string code = r.error_code();
      if (code == "MOVED" || code == "ASK" || code == "READONLY") {
        redirect = &r;
        break;
      }
    }
    if (!redirect) return replies;
    std::string code = redirect->error_code();
    if (code == "READONLY") {
      // A failover demoted the server we talk to.
      if (m_url.kind != Url::Kind::sentinel || re_resolved) {
        throw Error(exit_code::k_unavailable,
                    fmt::format("{}: the server is a read-only replica", c.endpoint().display()));
      }
      log::verbose("{} became a replica; asking the sentinels again", c.endpoint().display());
      c.close();
      m_current = nullptr;
      re_resolved = true;
      continue;
    }
    std::vector<std::string> words = util::split(redirect->str, " ");
    std::string host;
    int port = 0;
    if (words.size() != 3 || !split_address(words[2], host, port)) {
      throw Error(exit_code::k_internal, fmt::format("cannot follow the redirection '{}'", redirect->str));
    }
    Connection& target = node(host, port);
    log::verbose("{} redirects to {} ({})", c.endpoint().display(), target.endpoint().display(), words[0]);
    if (code == "MOVED") {
      m_current = &target;  // the slot lives there now: later commands of this lock go there too
      continue;
    }
    // ASKING applies to the next command only: one before each.
    std::vector<Command> asking;
    for (const Command& command : commands) {
      asking.push_back({"ASKING"});
      asking.push_back(command);
    }
    std::vector<Reply> both = target.pipeline(asking, undo, budget);
    std::vector<Reply> answered;
    for (size_t i = 1; i < both.size(); i += 2) answered.push_back(std::move(both[i]));
    bool again = false;
    bool busy_slot = false;
    for (const Reply& r : answered) {
      again = again || r.error_code() == "MOVED" || r.error_code() == "ASK";
      busy_slot = busy_slot || r.error_code() == "TRYAGAIN";
    }
    if (busy_slot && tries_left-- > 0) {
      // The keys are split between the two nodes for the moment: ask again from the start.
      log::verbose("{}: slot being migrated (TRYAGAIN); retrying", target.endpoint().display());
      if (!pause(util::Millis(50))) return answered;
      --hop;
      continue;
    }
    if (!again) return answered;
  }
  throw Error(exit_code::k_unavailable,
              fmt::format("{}: more than {} Cluster redirections", m_url.display(), k_max_redirects));
}

std::vector<Reply> Client::pipeline(const std::vector<Command>& commands, const UndoCommands& undo,
                                    util::Millis budget) {
  return routed(commands, budget, undo);
}

Reply Client::call(const Command& argv) { return std::move(routed({argv}, util::Millis(0), {}).front()); }

Reply Client::call_blocking(const Command& argv, util::Millis budget) {
  return std::move(routed({argv}, budget, {}).front());
}

Reply Client::eval(const Script& script, const std::vector<std::string>& keys, const std::vector<std::string>& args,
                   const Undo& undo) {
  ScriptWay way = first_way(script, m_functions);
  // Made and sent only if the answer is lost: the way of the exchange under way.
  UndoCommands sent;
  if (undo) sent = [&](const Connection& on) { return undo_commands(undo(), way, on); };
  Reply reply;
  for (;;) {
    std::vector<Reply> replies = routed(script_commands(script, way, keys, args), util::Millis(0), sent);
    std::optional<ScriptWay> next = next_way(way, replies);
    if (!next) {
      reply = std::move(replies.back());
      // (EVAL and EVALSHA leave the script cached on the server: an undo on this connection
      // may go by EVALSHA. Reconnected, it has run none.)
      if ((way == ScriptWay::evalsha || way == ScriptWay::eval) && !reply.is_error())
        current().ran(code_of(script, way));
      break;
    }
    if (*next == ScriptWay::load) log::verbose("loading rlock's function library into the server");
    if (*next == ScriptWay::evalsha) {
      log::verbose("running scripts by EVALSHA: {}", replies.front().str);
      m_functions = false;
    }
    if (*next == ScriptWay::eval) log::verbose("loading script {} into the server's cache", script.name);
    way = *next;
  }
  if (reply.is_error() && reply.str.find("can't run this command") != std::string::npos) {
    throw Error(exit_code::k_permission,
                fmt::format("{}: permission denied: the ACL user may not run {} (in rlock's {} script); rlock needs "
                            "{} on its keys",
                            m_url.display(), script_command(script, reply.str), script.name, acl::k_writer));
  }
  return reply;
}

std::vector<std::string> Client::scan(const std::string& match) {
  std::vector<Connection*> masters;
  Reply slots;
  try {
    slots = current().call({"CLUSTER", "SLOTS"});
  } catch (const Error& e) {
    // An ACL user without +cluster on a plain server: nothing to spread over.
    if (e.exit_code() != exit_code::k_permission) throw;
    slots = Reply{Reply::Type::error, 0, "NOPERM", {}};
  }
  if (slots.is_error() || slots.type != Reply::Type::array) {
    masters.push_back(&current());  // not a Cluster
  } else {
    std::set<std::string> seen;
    for (const Reply& range : slots.elements) {
      if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) continue;
      const std::string& host = range.elements[2].elements[0].str;
      int64_t port = range.elements[2].elements[1].integer;
      if (!seen.insert(fmt::format("{}:{}", host, port)).second) continue;
      masters.push_back(&node(host, static_cast<int>(port)));
    }
  }
  std::vector<std::string> keys;
  for (Connection* c : masters) {
    std::string cursor = "0";
    do {
      Reply r = c->call({"SCAN", cursor, "MATCH", match, "COUNT", "1000"});
      if (r.is_error() || r.type != Reply::Type::array || r.elements.size() != 2) {
        throw Error(exit_code::k_internal,
                    fmt::format("{}: unexpected reply to SCAN: {}", c->endpoint().display(), r.str));
      }
      cursor = r.elements[0].str;
      for (const Reply& k : r.elements[1].elements) keys.push_back(k.str);
    } while (cursor != "0");
  }
  return keys;
}

}  // namespace rlock::redis
