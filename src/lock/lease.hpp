#pragma once

#include "error.hpp"
#include "lock/name.hpp"
#include "lock/node.hpp"
#include "lock/protocol.hpp"
#include "lock/timing.hpp"
#include "lock/validity.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// Who takes a lock, as shown by status and the history (never the token).
struct Holder {
  std::string host;
  std::string pid;
  std::string user;
  std::string command;
};

// The kinds of hold.
enum class Mode {
  exclusive,  // one holder (the default)
  shared,     // many shared holders, or one exclusive (--shared)
  semaphore,  // up to `limit` holders (--limit N, N > 1)
};

// One contender for a lock: what it asks for and who it is.
struct Contender {
  std::string token;  // 48 hex characters: a public id (16), then 128 secret bits
  util::Millis ttl = k_default_ttl;
  Holder holder;
  Mode mode = Mode::exclusive;
  int limit = 1;
  util::Millis min_hold{0};  // --min-hold: a used hold lingers until this long after its start
  bool supersede = false;    // --supersede: replaces older superseding waiters
  bool preempt = false;      // --preempt: asks a preemptible holder to stop, and is served next
  bool preemptible = false;  // --preemptible: a --preempt request may ask this hold to stop
  // --once-per: the tick this run is for (ms since the epoch): taken only if no hold took this
  // tick or a later one, and then recorded with the hold.
  std::optional<int64_t> tick;

  // Names its place in the queue and its mailbox: the first 16 characters of the token.
  std::string id() const { return token.substr(0, 16); }
};

// --once-per: the tick of period that the time now_ms (ms since the epoch) belongs to, the nearest
// multiple of period: a host whose clock or timer is off by less than period/2 finds the same one.
inline int64_t nearest_tick(int64_t now_ms, util::Millis period) {
  int64_t p = period.count();
  return (now_ms + p / 2) / p * p;
}

// A new token: 64 bits of id, then 128 secret bits, from getrandom(2).
std::string new_token();

// The id in a token (its first 16 characters).
inline std::string id_of(const std::string& token) { return token.substr(0, 16); }

// The answer to one attempt at taking a lock, or one step of waiting for it.
struct Attempt {
  enum class Outcome { acquired, reentered, busy, queued, superseded, done };

  Outcome outcome = Outcome::busy;
  util::BootClock::time_point sent_at;   // when the request left: the lease counts from here
  int64_t fence = 0;                     // acquired, reentered
  int slot = 0;                          // acquired with --limit: 1..N
  size_t enclosing = 0;                  // reentered: the index of the enclosing token that owns it
  std::optional<util::Millis> ttl_left;  // busy, reentered, queued at the head: the holder's lease left
  Holder holder;                         // busy, queued: who holds it (as far as its info says)
  std::optional<util::Millis> held_for;  // busy, queued: since when, by the server's clock; done: how long ago
  bool lingering = false;                // busy, queued: the hold is --min-hold's, with no process behind it
  int position = 0;                      // queued: 1 for the head
  int queue_length = 0;                  // busy, queued
  std::optional<util::Millis> waited;    // queued: time in the queue, by the server's clock; acquired after
                                         // waiting (take_lock): how long it waited, by ours
  std::vector<std::string> watch;        // queued: the ids whose mailboxes to wait on
  std::string epoch;                     // queued: the epoch of this view (the next heartbeat's light step)
  bool far = false;                      // queued: behind others, with the far lease: the far heartbeat
  std::string arrival;                   // queued, when this call made the place: its score (server us)
  bool contended = false;                // busy, Redlock: nobody has a majority (leftovers, a split)
  Holder superseded_by;                  // superseded: the newer request
  int64_t tick = 0;                      // done: the tick already run (--once-per), by holder.host,
  int64_t tick_at = 0;                   // at this server time (ms since the epoch)
  // Given to wait_turn: the place, if it is gone, was lost by the server (a failover, a restart),
  // not lapsed: the waiter joins again at `arrival` (which the caller keeps from the call that
  // made the place), having waited this long by its own clock.
  std::optional<util::Millis> rejoin_waited;
};

// Tries once to take the lock, atomically, recording holder info and the next fencing token;
// with `queue`, joins the queue when it cannot be taken now (else reports it busy). Nobody jumps
// the queue. A lock owned by one of enclosing_tokens (holds of the calling process tree) is
// re-entered. Throws Error 65 when the lock is used with another limit or kind.
Attempt try_acquire(Node& node, const LockName& name, const Timing& timing, const Contender& contender, bool queue,
                    const std::vector<std::string>& enclosing_tokens);

// One step of waiting in the queue: blocks (BLPOP) until one of the watched mailboxes, or the
// contender's own, is pushed or `heartbeat` passes, then claims the lock if it was granted, else
// renews the place in the queue (joining it again if it was lost). Returns acquired, queued, or
// superseded (a newer --supersede request took the place). `last` is the previous answer: its
// watch list, and, for a waiter behind others that is no preemptor, the epoch of its view; after
// a BLPOP that timed out, the light heartbeat (beat.lua) sends that epoch, and while nothing
// changed it only renews the place and `last` is returned again; else the full step follows.
// A waiter that is no preemptor and stays behind others after the step is given the far lease
// (Timing::far_lease) and returns `far`: its next heartbeat may be the far one. A heartbeat of 0
// takes the full step at once, without blocking (a waiter that moved to another master). With
// last.rejoin_waited, a waiter whose place is gone joins again at last.arrival (wait.lua).
Attempt wait_turn(Node& node, const LockName& name, const Timing& timing, const Contender& contender,
                  const Attempt& last, util::Millis heartbeat);

// Leaves the queue (or gives back a grant not yet claimed), waking whoever waited behind; with
// timed_out (--wait ran out), the history records the refusal.
void cancel(Node& node, const LockName& name, const Timing& timing, const std::string& token, bool timed_out);

// Waits for n replicas to acknowledge the acquisition (WAIT, best effort: Redis replication is
// asynchronous). Throws rlock::Error 69 when fewer answer within timeout.
void confirm_replicas(Node& node, const LockName& name, int n, util::Millis timeout);

// How a hold ended, for the history: the command's exit status, and who held it (recorded as a
// loss when the token no longer holds the lock); and whether it lingers (--min-hold).
struct Ending {
  std::string exit_status;  // "" when there was no command
  Holder holder;
  int64_t fence = 0;
  // The hold was used: its command started (run), or its token was handed out (acquire). Only a
  // used hold lingers; one never used is given back at once ("returned" in the history).
  bool used = false;
  // A used hold: how much longer it lingers, from the server's now (run: what is left of
  // --min-hold since the command started, on rlock's monotonic clock); nullopt: until the minimum
  // recorded when the hold was claimed (the release of an acquire hold).
  std::optional<util::Millis> linger;
  // A release tried again after an attempt whose answer was lost: that attempt may have released
  // it, so a hold found gone is not recorded as lost.
  bool retry = false;
};

// The release script's arguments after the timing: token, exit status, who, fence, and whether
// and how long the hold lingers (see scripts/release.lua).
std::vector<std::string> release_args(const std::string& token, const Ending& ending);

// Gives the hold of token back and hands the lock on (a used hold with --min-hold lingers until
// its time); false when the token no longer holds it.
bool release(Node& node, const LockName& name, const Timing& timing, const std::string& token, const Ending& ending);

// What a successful extend found and did.
struct Extension {
  std::optional<util::Millis> ttl_left_before;  // the lease's PTTL just before it was reset
  util::Millis ttl{0};                          // the TTL it was reset to
  std::optional<Holder> preempted_by;           // a --preempt request asks this hold to stop
};

// A keeper that holds a lock for a process (acquire --keepalive), recorded with the hold.
struct KeeperInfo {
  pid_t keeper = 0;
  pid_t watched = 0;
};

// Resets the lease of token's hold, to ttl or (nullopt) the TTL it was taken with, recording the
// keeper if there is one; nullopt when the token no longer holds the lock.
std::optional<Extension> extend(Node& node, const LockName& name, const Timing& timing, const std::string& token,
                                std::optional<util::Millis> ttl, const std::optional<KeeperInfo>& keeper = {});

// What release --force removed.
struct ForcedRelease {
  bool was_held = false;
  Holder holder;  // the exclusive holder, if there was one
  std::optional<int64_t> fence;
  int shared_holds = 0;  // shared or semaphore holds removed
};

// Removes every hold of the lock whoever has it.
ForcedRelease force_release(Node& node, const LockName& name, const Timing& timing);

// "host\tpid\tuser\tcmd", as the scripts name a contender in notices and the history.
Holder parse_who(const std::string& text);

// The server cannot serve the lock for a moment (TRYAGAIN, LOADING, CLUSTERDOWN...): exit 69,
// but worth retrying while a --wait lasts.
class TransientError : public Error {
public:
  using Error::Error;
};

// Throws the rlock::Error that an error reply to a lock script means (65 for foreign data at the
// lock's name or a limit that disagrees, 64 for an exclusive hold inside a shared one of the same
// process tree, 70 for anything unexpected).
void check_reply(const redis::Reply& reply, const LockName& name);
// The error (65) for another program's data at one of a lock's keys.
Error foreign_data(const std::string& key);

// The reply every lock script gives: {code, more, {ids to push}, payload...} (lock/protocol.txt).
struct ScriptReply {
  protocol::Code code = protocol::Code::busy;
  bool more = false;                  // the script's budget ran out with work left: call again
  std::vector<std::string> push;      // contenders whose mailboxes the caller pushes
  std::vector<redis::Reply> payload;  // the rest, by script and code
};
// Reads a script's reply; throws as check_reply does for an error reply, Error 70 when malformed.
ScriptReply read_script_reply(redis::Reply reply, const LockName& name);

// The contender's arguments of the acquire and wait scripts: token ttl host pid user cmd mode
// limit options min_hold tick (see scripts/common.lua).
std::vector<std::string> contender_args(const Contender& c, bool queue, bool redlock = false);
// Reads an acquire or wait script's reply into an attempt (enclosing_count: the enclosing tokens
// sent, for a re-entry's index).
Attempt read_attempt(const ScriptReply& reply, const LockName& name, size_t enclosing_count);

}  // namespace rlock::lock
