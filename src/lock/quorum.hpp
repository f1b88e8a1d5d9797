#pragma once

#include "error.hpp"
#include "lock/inspect.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "lock/timing.hpp"
#include "lock/released.hpp"
#include "redis/connection.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// What a master says of itself (its INFO, sent with the greeting of every connection).
struct MasterIdentity {
  std::string run_id;  // changes at every start: a restart shows
  std::optional<int64_t> uptime_s;
  bool persistent = false;  // appendonly: its locks survive a restart (given appendfsync always)
};

// One node's answer to a request sent to several at once: its reply, or why it has none (down,
// timed out, refused).
struct NodeAnswer {
  std::optional<redis::Reply> reply;
  std::optional<Error> error;
};

// What the Redlock algorithm needs of N independent masters: one script run on a chosen subset
// of them at once, each bounded by a per-node timeout, the whole answered from one poll. Tests
// drive the algorithm with a fake.
class NodeSet {
public:
  virtual ~NodeSet() = default;
  virtual size_t size() const = 0;
  // How a node is named in messages (its URL without a password).
  virtual std::string name(size_t i) const = 0;
  // What node i said of itself on its current connection; nullopt when it said nothing (not
  // connected yet, or INFO refused by an ACL).
  virtual std::optional<MasterIdentity> identity(size_t i) const = 0;
  // Runs script with keys and args[i] on each node i where which[i]; the answers in node order
  // (empty for nodes not asked).
  virtual std::vector<NodeAnswer> eval_all(const redis::Script& script, const std::vector<std::string>& keys,
                                           const std::vector<std::vector<std::string>>& args,
                                           const std::vector<bool>& which) = 0;
  // Runs script as eval_all does, without waiting for the answers: they are read, and dropped,
  // before the next request to the same nodes (if there is none, not at all: each node has the whole
  // request and runs it). For a write that nothing depends on. By default
  // (a node set that cannot leave a request under way), eval_all.
  virtual void send_all(const redis::Script& script, const std::vector<std::string>& keys,
                        const std::vector<std::vector<std::string>>& args, const std::vector<bool>& which) {
    eval_all(script, keys, args, which);
  }
  // Before an acquisition: each connection opened from now on also reads what an acquisition
  // needs of a master (whether it keeps its locks across a restart). By default nothing.
  virtual void prepare_acquisition() {}
  // Whether the answers so far (a node still waiting has neither reply nor error) decide.
  using Decided = std::function<bool(const std::vector<NodeAnswer>&)>;
  // Runs script as eval_all does, but stops waiting as soon as `decided` says the answers so far
  // are enough, once every node still to answer has a request sure to run there (see
  // ClientNodeSet::eval). A node not waited for has neither reply nor error; its connection
  // is closed. By default (a node set that cannot stop early), eval_all.
  virtual std::vector<NodeAnswer> eval_until(const redis::Script& script, const std::vector<std::string>& keys,
                                             const std::vector<std::vector<std::string>>& args,
                                             const std::vector<bool>& which, const Decided& decided) {
    (void)decided;
    return eval_all(script, keys, args, which);
  }
};

// Redlock over independent masters (see rlock(7), which states its guarantees and assumptions), with
// a fencing token that increases strictly per key even as masters fail and restart:
//
//  1. Phase 1, on every master at once: the acquire script (SET NX PX, INCR fence, holder info),
//     each within the per-node timeout. Success needs a majority (N/2+1) reached while validity
//     remains: validity = TTL - elapsed - drift, drift = TTL/100 + 2ms, elapsed measured on
//     CLOCK_BOOTTIME from when the requests were sent.
//  2. T = the largest fence any granting master handed out.
//  3. Phase 2, on the masters that granted: if the lock there is still ours, fence = max(fence, T).
//  4. T is valid only if a majority acknowledged phase 2 within the validity; else the attempt
//     failed. When every granting master handed out T itself (the usual case: the counters move
//     together), its counter is T already, set while it held the lock: phase 2 is sent (it
//     records the acquisition in the histories) but not waited for, unless a minimum hold
//     (--min-hold) must start there.
// On failure the lock is released on every master, those that did not answer included.
//
// Why T grows: a later holder B took a majority M_B. The earlier holder A wrote T_A back to a
// majority W_A while it held the lock there (or handed T_A out itself, on a majority, in phase 1). Two majorities share
// a master m; B's acquire ran there only after A's lock there ended, so after A's write-back: B's INCR on m gives more
// than T_A, and T_B, the largest of B's INCRs, is more than T_A.
//
// Masters are told apart by their run_id: one server named twice (two URLs, one server) is
// refused, as it would count twice. A master counts towards a majority only if it kept its
// locks: at an acquisition, one that started less than a TTL ago without persistence may have
// lost a lock another holder still has (antirez's delayed restart, done by the client); during a
// hold, one whose run_id changed since the acquisition restarted and may have lost this one.
class Quorum {
public:
  using Now = std::function<util::BootClock::time_point()>;

  Quorum(NodeSet& nodes, Timing timing, Now now);

  size_t majority() const { return m_nodes.size() / 2 + 1; }

  // The outcome of one attempt at taking the lock.
  struct Acquisition {
    Attempt attempt;                    // acquired (fence T, sent_at), reentered, busy, or done (--once-per)
    std::vector<bool> granted;          // the masters that granted phase 1
    std::vector<std::string> failures;  // masters that did not answer, "NAME: why"
    bool unavailable = false;           // fewer than a majority answered at all (exit 69, never busy)
    bool majority_busy = false;         // one other holder has the lock on a majority (busy)
  };

  // One attempt. `enclosing` as for try_acquire.
  Acquisition acquire(const LockName& name, const Contender& contender, const std::vector<std::string>& enclosing);

  // The outcome of one renewal.
  enum class Renewal { renewed, lost, failed };
  struct Extended {
    Renewal outcome = Renewal::failed;
    std::optional<Extension> extension;  // renewed
    std::vector<std::string> failures;
  };
  // Extends on every master at once; renewed only when a majority extended within the validity
  // left, lost when a majority says the token does not own the lock any more. A master that lost
  // the key (a restart) is set again only together with the fence merge (fence >= T there).
  Extended extend(const LockName& name, const std::string& token, std::optional<util::Millis> ttl,
                  util::Millis lease_ttl, int64_t fence, const ExtendNote& note = {});

  // What a release on every master found.
  struct Releases {
    size_t held = 0;        // masters where the token still held the lock
    size_t answered = 0;    // masters that answered at all
    size_t discounted = 0;  // of them, masters restarted since the acquisition: their answer proves nothing
    std::vector<std::string> failures;
  };
  // Releases on every master; `ending` goes into the history (quiet: none, for the leftovers of
  // an attempt that failed). Unless quiet, the answers are read only until they decide the
  // verdict (a master not waited for, where its release is sure to run, is neither counted nor a
  // failure).
  Releases release(const LockName& name, const std::string& token, const Ending& ending, bool quiet = false);
  // What the answers prove: released or not held only when a majority says so, else unknown (a
  // master that timed out may still hold it). Throws Error 69 when fewer than a majority answered.
  Released verdict(const Releases& answers) const;

  // The lock as a majority of the masters shows it, and how each master sees it. Throws Error 69
  // when fewer than a majority answered. views[i]: master i's state, or nullopt with
  // failures[i] set.
  LockState merge_views(const LockName& name, const std::vector<std::optional<LockState>>& views,
                        const std::vector<std::string>& holder_ids, const std::vector<std::string>& failures) const;

  // The validity left of a lease for ttl whose requests were sent at sent_at: TTL - elapsed - drift.
  util::Millis validity(util::BootClock::time_point sent_at, util::Millis ttl) const;

private:
  // The reason master i's answer does not count, if it does not: for an acquisition of ttl
  // (young), or during the hold (restarted).
  std::optional<std::string> discount_young(size_t i, const std::optional<MasterIdentity>& id, util::Millis ttl) const;
  std::optional<std::string> discount_restarted(size_t i) const;
  // The steps of acquire: phase 1 on every master (throws Error 78 for a member that cannot be
  // one), the count of its answers (refused: a refusal naming the holder), phase 2 (the fence
  // merge: true when a majority took it within the validity, else why not in out.failures), and
  // the give-back of an attempt that failed (busy, or unavailable).
  struct Votes;
  std::vector<NodeAnswer> phase1(const LockName& name, const Contender& contender,
                                 const std::vector<std::string>& enclosing, const std::vector<std::string>& keys);
  Votes count(const std::vector<NodeAnswer>& answers, const std::vector<std::optional<MasterIdentity>>& ids,
              const LockName& name, util::Millis ttl, Acquisition& out) const;
  static void refused(const ScriptReply& reply, const LockName& name, Votes& votes, Attempt& attempt);
  // Phase 2; `unanimous`: every granting master handed out `highest` itself.
  bool merge_fence(const LockName& name, const std::vector<std::string>& keys, const Contender& contender,
                   int64_t highest, bool unanimous, util::BootClock::time_point sent_at, Acquisition& out);
  void give_back(const LockName& name, const std::string& token, const Votes& votes, Acquisition& out);
  // What the release's answers say (a master with neither reply nor error was not waited for).
  Releases tally_releases(const std::vector<NodeAnswer>& answers, const LockName& name) const;
  // Throws Error 78 when two answering masters are one server.
  void refuse_duplicates(const std::vector<std::optional<MasterIdentity>>& ids, const LockName& name,
                         const std::string& token);

  NodeSet& m_nodes;
  Timing m_timing;
  Now m_now;
  std::vector<std::string> m_run_ids;  // each master's run_id when the lock was taken ("" unknown)
};

// A quorum's failure to hear from a majority: rlock::Error 69, naming the masters that failed.
[[noreturn]] void no_majority(const std::vector<std::string>& failures, size_t masters, size_t majority);

}  // namespace rlock::lock
