#pragma once

#include "commands/options.hpp"
#include "lock/holds.hpp"
#include "lock/name.hpp"
#include "proc/watch.hpp"
#include "util/clock.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlock::commands::keeper {

// What a keeper's state file says. One file per keepalive hold, named by the token's public id,
// in the caller's own state directory (mode 0700): the keeper writes it, and release and extend
// read it to stop the keeper or to report that the lock was lost, and when.
struct State {
  std::string lock_key;  // the lock's full Redis key
  std::string token;     // for a nested run or acquire in the watched tree (re-entry)
  std::string boot_id;
  pid_t keeper = 0;
  uint64_t keeper_start = 0;
  pid_t watched = 0;
  uint64_t watched_start = 0;
  std::string status;   // "running", "released", "lost"
  std::string reason;   // lost: why
  int64_t when_ms = 0;  // wall clock of the status, ms since the epoch
};

// The caller's state directory: the first of $XDG_RUNTIME_DIR/rlock, /tmp/rlock-UID and
// ~/.rlock that is a directory of the caller's own that only they can use (with create, made
// 0700 when missing), so that another user can neither read nor plant keeper states, nor squat
// the directory first. rlock::Error 71 when none is.
std::string state_dir(bool create);

// The state of the keepalive hold with this token id, if there is one.
std::optional<State> read_state(const std::string& id);
void remove_state(const std::string& id);

// The keepalive holds of processes this process descends from, as holds (re-entry).
std::vector<lock::Hold> enclosing_holds();

// How to keep a lock just taken.
struct Spec {
  ConnectOptions connect;
  lock::LockName name;
  std::string token;
  util::Millis ttl;
  util::BootClock::time_point sent_at;  // when the acquire was sent: the lease counts from there
  pid_t watched;                        // the process whose life the hold follows
  std::optional<util::Millis> max_hold;
  int signal = 0;          // sent to the watched process when the lock is lost (0: none)
  std::string log_target;  // empty: no log; "syslog:"; else a file appended to
  int64_t fence = 0;       // the hold's fencing token (a quorum sets a restarted master again with it)
  lock::Holder holder;     // who holds it, for the history
};

// Starts the keeper (a detached process: its own session, stdio on /dev/null, no other fd) and
// returns its pid once it is armed: it watches the process, has renewed the lock once and
// recorded itself with it. Throws rlock::Error when it cannot start; the lock is then the
// caller's to give back.
pid_t start(const Spec& spec, proc::Watched& watched);

// What release and extend make of a token's keeper: the outcome to report, if the keeper decided
// it (it released the lock, or the lock was lost).
struct Ending {
  bool released = false;  // the keeper gave the lock back
  bool lost = false;      // the lock was lost while kept: reason, when
  std::string reason;
  int64_t when_ms = 0;
};

// release: stops the keeper of token, which gives the lock back itself, and reports what
// happened; nullopt when the token has no keeper (or it died): the caller releases as usual.
std::optional<Ending> stop(const std::string& token, util::Millis wait);

// extend: the loss recorded for token, if any (the state is then removed).
std::optional<Ending> recorded_loss(const std::string& token);

}  // namespace rlock::commands::keeper
