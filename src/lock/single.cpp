// The backend of one Redis: a server, a Sentinel-managed master, or a Cluster.
#include "lock/backend.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/history.hpp"
#include "lock/server.hpp"
#include "log.hpp"

#include <fmt/core.h>

#include <algorithm>

namespace rlock::lock {

namespace {

class SingleBackend final : public Backend {
public:
  SingleBackend(const Servers& servers, Timing timing)
      : Backend(timing),
        m_client(std::make_unique<redis::Client>(servers.urls.front(), servers.timeouts, servers.tls)),
        m_node(*m_client) {}

  bool quorum() const override { return false; }
  std::string display() const override { return m_client->url().display(); }
  redis::Client* single() override { return m_client.get(); }
  void set_interrupt(int fd, std::function<bool()> on_ready) override {
    m_client->set_interrupt(fd, std::move(on_ready));
  }
  void cap_waits(std::optional<util::BootClock::time_point> cap) override { m_client->cap_waits(cap); }
  bool confirm_master() override { return m_client->confirm_master(); }
  bool follow_master() override {
    bool moved = false;
    m_client->confirm_master(&moved);
    return moved;
  }
  bool confirm_grant(const LockName& name, const std::string& token, std::string& why) override {
    if (confirmed_where_it_lives(name, why)) return true;
    try {
      // (A retry's: the server may have been demoted meanwhile and redirect the give-back to the
      // one that took its place, where the lock is not this token's: not recorded as lost.)
      Ending back;
      back.retry = true;
      lock::release(m_node, name, timing(), token, back);
    } catch (const Error& e) {
      log::verbose("could not give back the grant of {} ({}); it lapses with its lease", name.key, e.what());
    }
    m_client->forget_master();
    return false;
  }
  void learn_nodes() override { m_client->learn_nodes(); }

  Attempt try_acquire(const LockName& name, const Contender& c, bool queue,
                      const std::vector<std::string>& enclosing) override {
    return lock::try_acquire(m_node, name, timing(), c, queue, enclosing);
  }
  Attempt wait_turn(const LockName& name, const Contender& c, const Attempt& last, util::Millis heartbeat,
                    bool fresh) override {
    return lock::wait_turn(m_node, name, timing(), c, last, heartbeat, fresh);
  }
  void cancel(const LockName& name, const std::string& token, bool timed_out) override {
    lock::cancel(m_node, name, timing(), token, timed_out);
  }
  Released release(const LockName& name, const std::string& token, const Ending& ending) override {
    auto give_back = [&] {
      return lock::release(m_node, name, timing(), token, ending) ? Released::released : Released::not_held;
    };
    // Released where the majority (of the sentinels, of a Cluster's masters) says the lock lives:
    // a hold on a server they no longer name is not known to have been ours alone.
    auto where_it_lives = [&](const std::string& why) {
      log::verbose("{}: {}; releasing {} where the majority says it lives", display(), why, name.key);
      m_client->forget_master();
    };
    std::string why;
    if (first_request_may_ask_cluster(name)) {
      // (rlock release: its release is the first request, and the eviction check's cache read
      // with it says whether this is a Cluster node, with no INFO and no round trip of its own;
      // the check follows, and a release on the wrong node is sent again where the lock lives.)
      Released released = give_back();
      if (confirmed_where_it_lives(name, why)) return released;
      where_it_lives(why);
      return give_back();
    }
    if (!confirmed_where_it_lives(name, why)) where_it_lives(why);
    return give_back();
  }
  std::optional<Extension> extend(const LockName& name, const std::string& token, std::optional<util::Millis> ttl,
                                  util::Millis, int64_t, const ExtendNote& note) override {
    return lock::extend(m_node, name, timing(), token, ttl, note);
  }
  ForcedRelease force_release(const LockName& name) override { return lock::force_release(m_node, name, timing()); }
  LockState inspect(const LockName& name, int most) override { return lock::inspect(m_node, name, most); }
  std::vector<std::string> scan_keys(const std::string& prefix, const std::string& pattern) override {
    return lock::scan_keys(m_node, prefix, pattern);
  }
  std::vector<std::string> scan_logs(const std::string& prefix, const std::string& pattern) override {
    return lock::scan_keys(m_node, prefix, pattern, true);
  }
  using Backend::read_log;
  std::vector<Event> read_log(const LockName& name, const LogRange& range) override {
    redis::Reply r = m_client->call(log_range(name, range));
    if (r.is_error()) {
      if (r.error_code() == "WRONGTYPE") throw foreign_data(name.log_key());
      check_reply(r, name);
    }
    std::vector<Event> events = parse_events(r, name.key);
    if (range.after.empty()) std::reverse(events.begin(), events.end());
    return events;
  }
  std::vector<std::string> scan_summaries(const std::string& prefix, const std::string& pattern) override {
    return lock::scan_summaries(m_node, prefix, pattern);
  }
  Summary read_summary(const LockName& name) override { return lock::read_summary(m_node, name); }
  void confirm_replicas(const LockName& name, int n, util::Millis timeout) override {
    lock::confirm_replicas(m_node, name, n, timeout);
  }

  std::optional<std::string> restarted_within(util::Millis held) override {
    // The default sections: the server's (run_id, uptime) and persistence (appendonly).
    redis::Reply info = m_client->call(info_member());
    if (info.type != redis::Reply::Type::string) return std::nullopt;
    return restart_text(parse_info(info.str), held, display());
  }

  void check_eviction_before(const LockName& name, bool strict) override {
    if (strict) {
      // (INFO refused: exit 77, --strict needs it.)
      if (auto facts = read_facts(true)) check_eviction(*facts, m_client->url().display(), true);
    } else {
      // What the policy was when last read, with the first command: no round trip, and a GET
      // instead of an INFO (which costs the server 5 to 40 us) on every run.
      m_policy_key = name.policy_key();
      m_client->set_greeting({"GET", m_policy_key});
    }
  }
  void check_eviction_after(bool strict) override {
    if (strict) return;
    std::optional<redis::Reply> cached = m_client->greeting_reply();
    if (!cached || cached->is_error()) return;
    if (cached->type == redis::Reply::Type::string) {
      check_cached_policy(cached->str, m_client->url().display());
      return;
    }
    // Nobody read it within the last minute: INFO (read already if a grant asked whether this is
    // a Cluster node), and what it said kept for the next minute.
    try {
      if (!m_facts) read_facts();
      if (!m_facts) return;
      check_eviction(*m_facts, m_client->url().display(), false);
      m_client->call(remember_policy(m_policy_key, cached_policy(*m_facts)));
    } catch (const Error& e) {
      // An ACL without +info (NOPERM) or a server gone: the check is skipped, as it is done
      // only to warn; the lock's own commands report a server that is gone.
      log::verbose("{}: the eviction check is skipped ({})", m_client->url().display(), e.what());
    }
  }

private:
  // Whether the server that granted (or holds) the lock is confirmed where the majority says the
  // lock lives: the sentinels' master (Sentinel), the owner of its slot (Cluster).
  bool confirmed_where_it_lives(const LockName& name, std::string& why) {
    if (!m_client->confirm_current_master(why)) return false;
    return !cluster() || m_client->confirm_slot_owner(name.lock_key(), hash_slot(name.lock_key()), why);
  }

  // Whether a request that is the first of this process (no greeting read yet, nothing known of
  // the server) to a redis:// URL can carry the eviction check's cache, which says whether the
  // server is a Cluster node: then it does (the greeting).
  bool first_request_may_ask_cluster(const LockName& name) {
    if (m_client->url().kind != redis::Url::Kind::direct || m_cluster || m_facts || !m_policy_key.empty() ||
        m_client->greeting_reply()) {
      return false;
    }
    m_policy_key = name.policy_key();
    m_client->set_greeting({"GET", m_policy_key});
    return true;
  }

  // Whether the server of a redis:// URL is a Cluster node: what the eviction check's cache, read
  // with the first command, says; else (the first run on the lock in a minute, --strict, a
  // cache of an earlier version) what INFO says, read once. No I/O for other URLs.
  bool cluster() {
    if (m_client->url().kind != redis::Url::Kind::direct) return false;
    if (m_cluster) return *m_cluster;
    const std::optional<redis::Reply>& cached = m_client->greeting_reply();
    if (!m_policy_key.empty() && cached && cached->type == redis::Reply::Type::string) {
      m_cluster = cached_cluster(cached->str);
      if (m_cluster) return *m_cluster;
    }
    read_facts();
    if (!m_cluster) m_cluster = false;
    return *m_cluster;
  }

  // INFO's memory and server sections, in one round trip: the eviction policy, whether the server
  // is a Cluster node (m_facts, m_cluster). An ACL without +info: nothing known, nothing checked
  // (strict: the permission error).
  std::optional<ServerFacts> read_facts(bool strict = false) {
    try {
      std::vector<redis::Reply> replies = m_client->pipeline({info_memory(), info_identity()});
      if (replies.size() != 2 || replies[0].type != redis::Reply::Type::string ||
          replies[1].type != redis::Reply::Type::string) {
        return std::nullopt;
      }
      ServerFacts facts = parse_info(replies[0].str + replies[1].str);
      m_facts = facts;
      if (m_client->url().kind == redis::Url::Kind::direct) m_cluster = facts.cluster;
      return facts;
    } catch (const Error& e) {
      if (strict || e.exit_code() != exit_code::k_permission) throw;
      log::verbose("{}: INFO is refused ({}): the eviction policy, and whether it is a Cluster node, are not checked",
                   m_client->url().display(), e.what());
      return std::nullopt;
    }
  }

  std::unique_ptr<redis::Client> m_client;
  ClientNode m_node;
  std::string m_policy_key;
  std::optional<bool> m_cluster;       // the server is a Cluster node (cluster())
  std::optional<ServerFacts> m_facts;  // what INFO said, once read
};

}  // namespace

std::unique_ptr<Backend> single_backend(const Servers& servers, Timing timing) {
  return std::make_unique<SingleBackend>(servers, timing);
}

}  // namespace rlock::lock
