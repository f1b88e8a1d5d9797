#pragma once

#include "redis/connection.hpp"
#include "redis/url.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rlock::redis {

// Where rlock's commands go. Knows the URL's kind: asks the sentinels for the master (all of
// them at once, trusting only an address a majority names, and checking its ROLE; asking again
// after a failover or a READONLY answer), follows Cluster MOVED and ASK redirections (at most
// k_max_redirects per command) and replaces a failed Cluster node by asking the other nodes it
// knows, and runs scripts by FCALL (loading rlock's function library on whichever node lacks it)
// or, where functions are not to be had, by EVALSHA with an EVAL fallback on NOSCRIPT.
// One Connection per node, opened lazily.
class Client {
public:
  Client(Url url, Timeouts timeouts, TlsOptions tls);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // See Connection::set_greeting; applies to every node that holds data (not the sentinels).
  void set_greeting(Command command);
  // The greeting's reply from the node that served the last command, if it was sent there (valid
  // until the next command).
  const std::optional<Reply>& greeting_reply() const;

  // See Connection::set_interrupt and Connection::cap_waits; applies to every node.
  void set_interrupt(int fd, std::function<bool()> on_ready);
  void cap_waits(std::optional<Clock::time_point> cap);

  // Sends the commands (all for one hash slot) in one write and returns their replies. `undo`:
  // see Connection::pipeline.
  std::vector<Reply> pipeline(const std::vector<Command>& commands, const UndoCommands& undo = {},
                              util::Millis budget = {});
  Reply call(const Command& argv);
  // Like call, allowing the server `budget` more than --io-timeout to answer (WAIT).
  Reply call_blocking(const Command& argv, util::Millis budget);
  // Runs a script (see ScriptWay). `undo`: scripts the server should run right after it if the
  // answer is lost (see pipeline), sent the way the script went (see undo_commands).
  Reply eval(const Script& script, const std::vector<std::string>& keys, const std::vector<std::string>& args,
             const Undo& undo = {});
  // Runs SCAN with MATCH on every master (each Cluster master, or the one server) and returns the keys.
  std::vector<std::string> scan(const std::string& match);

  // Sentinel: asks every sentinel at once which server is the master and whether a majority of
  // the configured sentinels names the same one; moves there if it changed (the old master may
  // stay writable for a while after a failover). False when no majority confirms a master: a
  // client and an old master cut off in a minority partition must not count their renewals.
  // Always true for other URLs. run calls this before every renewal; a waiter, every few steps
  // (`moved`: set when it moved to another master).
  bool confirm_master(bool* moved = nullptr);
  // Sentinel: whether the server that commands go to now is the master a majority of the
  // sentinels names and says so itself (ROLE), asked of all of them at once (one round trip).
  // False (with `why`) when not confirmed; the caller then forgets the master (forget_master),
  // so that the next command asks the sentinels again. Always true, with no I/O, for other URLs.
  // Checked after a grant and before a release.
  bool confirm_current_master(std::string& why);
  // Cluster: whether a majority of the Cluster's masters (those learned, and the node itself)
  // name the node that commands go to now as the owner of key's hash slot `slot`, asked of all
  // of them at once (EXISTS key: the answer, or a MOVED that names the owner; one round trip, and
  // CLUSTER SLOTS once per client first). False (with `why`) when not confirmed; the caller then
  // gives back what it must there and calls forget_master, which moves to the owner the majority
  // named. True, with nothing more asked, when the nodes cannot be learned (not a Cluster, an ACL
  // without +cluster|slots). Checked after a grant and before a release.
  bool confirm_slot_owner(const std::string& key, int slot, std::string& why);

  // Cluster: learns the other nodes (CLUSTER SLOTS), so that a master that fails later can be
  // replaced by asking them where its slots went. Asks once per client (the first call, even if
  // it fails); quietly does nothing elsewhere.
  void learn_nodes();

  // The connection commands go to now (a Sentinel master is looked up first); for a multi-node
  // exchange (Redlock), which drives it with others from one poll.
  Connection& connection() { return current(); }
  // A new connection to the node that connection() reaches (the Sentinel master, the Cluster node
  // that owns the last key used), with the same credentials and TLS: for a blocking command
  // driven from another poll (run's watch of its own mailbox).
  std::unique_ptr<Connection> open_sibling() {
    return std::make_unique<Connection>(current().endpoint(), m_timeouts, m_tls);
  }
  // Whether scripts run as functions (FCALL): from functions_wanted(), until a server or an ACL
  // refuses them (then EVALSHA for the client's life). For a multi-node exchange.
  bool functions() const { return m_functions; }
  void set_functions(bool on) { m_functions = on; }
  // After a failure on connection(): forget the Sentinel master, so the next use asks again; on a
  // Cluster, after confirm_current_master named another owner of the slot, go there.
  void forget_master();

  const Url& url() const { return m_url; }
  static constexpr int k_max_redirects = 5;

private:
  Connection& current();
  Connection& node(const std::string& host, int port);
  void resolve_master();
  // The address a majority of the sentinels names, if any; `why` explains when there is none.
  // With `also`, ROLE goes to that server in the same exchange, its outcome into role.
  std::optional<std::pair<std::string, int>> master_by_majority(std::string& why, Connection* also = nullptr,
                                                                std::optional<Outcome>* role = nullptr);
  std::vector<Reply> routed(const std::vector<Command>& commands, util::Millis budget, const UndoCommands& undo);
  // After the current Cluster node failed: moves to another known node, if there is one.
  bool try_other_node(const std::string& why);
  // How a Cluster node at host:port is known: its id as CLUSTER SLOTS gave it, else "host:port".
  std::string node_identity(const std::string& host, int port) const;
  // Waits `pause` (TRYAGAIN back-off) within the cap; false when the cap does not allow it.
  bool pause(util::Millis pause);
  void configure(Connection& c);

  Url m_url;
  Timeouts m_timeouts;
  TlsOptions m_tls;
  std::map<std::string, std::unique_ptr<Connection>> m_nodes;
  std::vector<std::unique_ptr<Connection>> m_sentinels;  // in the URL's order
  // A range of hash slots and its master, as CLUSTER SLOTS said.
  struct SlotRange {
    int first, last;
    std::string owner;  // its node_identity
  };
  std::vector<std::pair<std::string, int>> m_cluster_nodes;    // learned Cluster nodes
  std::vector<std::pair<std::string, int>> m_cluster_masters;  // ... those that served slots then
  std::vector<SlotRange> m_slot_ranges;                        // ... and their slots
  std::string m_slots_from;                                    // the node they were learned from
  std::map<std::string, std::string> m_node_ids;               // "host:port" -> node id, learned
  std::optional<std::pair<std::string, int>> m_named_owner;    // named by the last failed check
  bool m_nodes_asked = false;                                  // learn_nodes asked already
  Connection* m_current = nullptr;
  int m_interrupt_fd = -1;
  std::function<bool()> m_on_interrupt;
  std::optional<Clock::time_point> m_cap;
  Command m_greeting;
  bool m_functions = functions_wanted();
};

}  // namespace rlock::redis
