// The backend of one Redis: a server, a Sentinel-managed master, or a Cluster.
#include "lock/backend.hpp"

#include "error.hpp"
#include "exit_code.hpp"
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
  bool confirm_grant(const LockName& name, const std::string& token, std::string& why) override {
    if (m_client->confirm_current_master(why)) return true;
    try {
      lock::release(m_node, name, timing(), token, Ending{});
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
    std::string why;
    if (!m_client->confirm_current_master(why)) {
      // Released where the sentinels' majority says the lock lives: a hold on a master they no
      // longer name is not known to have been ours alone.
      log::verbose("{}: {}; asking the sentinels for the master to release {} on", display(), why, name.key);
      m_client->forget_master();
    }
    return lock::release(m_node, name, timing(), token, ending) ? Released::released : Released::not_held;
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
      check_eviction(m_client->call(info_memory()), m_client->url().display(), true);
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
    // Nobody read it within the last minute: INFO, and what it said kept for the next minute.
    try {
      std::vector<redis::Reply> replies = m_client->pipeline({info_memory(), remember_policy(m_policy_key, "")});
      const redis::Reply& info = replies.front();
      check_eviction(info, m_client->url().display(), false);
      if (info.type == redis::Reply::Type::string) {
        std::string facts = cached_policy(parse_info(info.str));
        if (!facts.empty()) m_client->call(remember_policy(m_policy_key, facts));
      }
    } catch (const Error& e) {
      // An ACL without +info (NOPERM) or a server gone: the check is skipped, as it is done
      // only to warn; the lock's own commands report a server that is gone.
      log::verbose("{}: the eviction check is skipped ({})", m_client->url().display(), e.what());
    }
  }

private:
  std::unique_ptr<redis::Client> m_client;
  ClientNode m_node;
  std::string m_policy_key;
};

}  // namespace

std::unique_ptr<Backend> single_backend(const Servers& servers, Timing timing) {
  return std::make_unique<SingleBackend>(servers, timing);
}

}  // namespace rlock::lock
