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

// Who takes a lock, as shown by status and the history (never the token): the protocol's record
// who (host, pid, user, cmd).
using Holder = protocol::Who;

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
  // --once-per: the period, and when this run fired (its start, on the boot clock). Each request
  // says how long ago that was, and the scripts place it on the server's clock: its tick.
  struct OncePer {
    util::Millis period;
    util::BootClock::time_point fired_at;
  };
  std::optional<OncePer> once_per;

  // Names its place in the queue and its mailbox: the first 16 characters of the token.
  std::string id() const { return token.substr(0, 16); }
};

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
  bool light = false;                    // queued: a light step kept the last full step's view (position, holder)
  bool far = false;                      // queued: behind others, with the far lease: the far heartbeat
  std::string arrival;                   // queued, when this call made the place: its score (server us)
  bool contended = false;                // busy, Redlock: nobody has a majority (leftovers, a split)
  Holder superseded_by;                  // superseded: the newer request
  int64_t tick = 0;                      // done: the tick that ran (--once-per), by holder.host,
  int64_t tick_at = 0;                   // at this server time (ms since the epoch),
  int64_t own_tick = 0;                  // and this run's own tick (when it fired, by the server's clock)
  std::optional<int64_t> overrun;        // busy, --once-per: the holder's tick, an earlier one
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
// superseded (a newer --supersede request took its place). `last` is the previous answer: its
// watch list, and, for a waiter that is no preemptor, the epoch of its view; after a BLPOP that
// timed out, the light heartbeat (beat.lua) sends that epoch, and while nothing it must see
// changed, it only renews the place and `last` is returned again (light: its position and holder
// are the last full step's); else the full step follows. The head of the queue takes the full
// step when its heartbeat ends with the holder's lease (it hands the lock on if the holder is
// gone), and so does a --once-per run at the head; with fresh, every waiter does (to show a
// position and holder that are current).
// A waiter that is no preemptor and stays behind others after the step is given the far lease
// (Timing::far_lease) and returns `far`: its next heartbeat may be the far one. A heartbeat of 0
// takes the full step at once, without blocking (a waiter that moved to another master). With
// last.rejoin_waited, a waiter whose place is gone joins again at last.arrival (wait.lua).
Attempt wait_turn(Node& node, const LockName& name, const Timing& timing, const Contender& contender,
                  const Attempt& last, util::Millis heartbeat, bool fresh = false);

// Leaves the queue (or gives back a grant not yet claimed), waking whoever waited behind; with
// timed_out (--wait ran out), the history records the refusal.
void cancel(Node& node, const LockName& name, const Timing& timing, const std::string& token, bool timed_out);

// Waits for n replicas to acknowledge the acquisition (WAIT, best effort: Redis replication is
// asynchronous). Throws rlock::Error 69 when fewer answer within timeout.
void confirm_replicas(Node& node, const LockName& name, int n, util::Millis timeout);

// How a hold ended, as its holder tells the release (src/lock/protocol.txt, outcome): the
// history's and the summary's record of it. Only success counts as a success; the losses are
// recorded as lost whether or not the token still holds the lock.
enum class HoldOutcome {
  none,             // never used (a give-back)
  success,          // the command exited 0 by itself, in a hold rlock did not end; or no command
  failed,           // the command exited with another status, or died of a signal rlock did not send
  max_hold,         // rlock stopped the command at --max-hold
  preempted,        // rlock stopped the command for a --preempt request
  guard_killed,     // the guard was killed, and rlock killed the command
  not_owned,        // a loss: a renewal found the token no longer owned the lock
  renewals_failed,  // a loss: renewals kept failing until the command had to be stopped
  deadline,         // a loss: the lease ran out before rlock could renew it (rlock was held up)
  restarted,        // a loss: the server restarted without persistence and lost the lock
};

// The outcome's word in the protocol ("" for none).
std::string_view outcome_word(HoldOutcome outcome);
// Whether the outcome is a loss of the lock.
bool is_loss(HoldOutcome outcome);

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
  // it (or recorded its loss), which the script looks for before it records a loss.
  bool retry = false;
  HoldOutcome outcome = HoldOutcome::none;
  // How long the hold lasted, as its holder measured it; nullopt: as the server measures it when
  // the release runs (a release after a loss may come long after the hold ended).
  std::optional<util::Millis> held = std::nullopt;
};

// The release script's request (see scripts/release.lua): token, exit status, who, fence,
// whether and how long the hold lingers, whether it is a retry, the outcome and the hold's length.
protocol::call::release release_call(const std::string& token, const Ending& ending);

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

// What an extend records beside the new lease.
struct ExtendNote {
  std::optional<KeeperInfo> keeper;  // acquire --keepalive: the keeper, recorded with the hold
  bool tick_ran = false;             // run --once-per: the command starts now, so its tick ran
};

// The extend script's request (see scripts/extend.lua).
protocol::call::extend extend_call(const std::string& token, std::optional<util::Millis> ttl, const ExtendNote& note);

// Resets the lease of token's hold, to ttl or (nullopt) the TTL it was taken with, recording what
// note says; nullopt when the token no longer holds the lock.
std::optional<Extension> extend(Node& node, const LockName& name, const Timing& timing, const std::string& token,
                                std::optional<util::Millis> ttl, const ExtendNote& note = {});

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

// The reply every lock script gives: {code, more, {ids to push}, payload...} (lock/protocol.txt):
// code is the script's Answer (protocol::call::NAME::Answer), read with answer().
struct ScriptReply {
  int64_t code = 0;
  bool more = false;                  // the script's budget ran out with work left: call again
  std::vector<std::string> push;      // contenders whose mailboxes the caller pushes
  std::vector<redis::Reply> payload;  // the rest, by script and code
};
// Reads a script's reply; throws as check_reply does for an error reply, Error 70 when malformed.
ScriptReply read_script_reply(redis::Reply reply, const LockName& name);

// The acquire script's request for the contender (see scripts/acquire.lua); the tick ("PERIOD
// AGE") as of now.
protocol::call::acquire acquire_call(const Contender& c, bool queue, bool redlock = false,
                                     const std::vector<std::string>& enclosing_tokens = {});
// The wait script's request for the contender, with the far lease ('' for a preemptor).
protocol::call::wait wait_call(const Contender& c, std::string far_lease);
// A script reply's code as the answer of call Call.
template <class Call>
typename Call::Answer answer(const ScriptReply& r) {
  return static_cast<typename Call::Answer>(r.code);
}
// Reads an acquire or wait script's reply into an attempt (enclosing_count: the enclosing tokens
// sent, for a re-entry's index).
Attempt read_attempt(const ScriptReply& reply, const LockName& name, size_t enclosing_count);

}  // namespace rlock::lock
