#pragma once

#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "redis/connection.hpp"
#include "redis/reply.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// One event of a lock's history (PREFIX{KEY}:log, a capped stream appended by the lock scripts):
// who acquired, was refused, released, lost, was superseded or preempted, or died holding it.
// Never a token or a password.
struct Event {
  std::string stream_id;  // the entry's id, "MS-SEQ"
  int64_t time_ms = 0;    // when, server clock, ms since the epoch
  std::string key;        // the lock's KEY
  std::string kind;       // acquired, busy, released, returned, lost, superseded, preempted, expired, overrun
  Holder holder;
  std::optional<int64_t> fence;
  std::optional<int64_t> waited_ms;
  std::optional<int64_t> held_ms;
  std::string exit_status;  // the command's, when there was one
  std::string outcome;      // an end: how its holder said it ended (protocol::outcome; "" unknown)
  std::string by;           // superseded, preempted: the newer request; a forced release: "release --force"
  std::string contender;    // the contender's public id (tells a quorum's copies of one event apart)
  // --once-per (ms since the epoch, by the server's clock): the tick taken (acquired), the tick that
  // ran (busy: by the host `by`) or the tick skipped (overrun); and the period
  std::optional<int64_t> tick;
  std::optional<int64_t> period_ms;
  Holder held_by;          // busy: who held the lock then (empty when nobody did: a queue)
  bool lingering = false;  // busy: the holder had released, its --min-hold kept the lock taken
};

// Which events of a lock's history to read.
struct LogRange {
  size_t count = 100'000;
  std::string after;                // a stream id: the first `count` after it, oldest first
  std::optional<int64_t> since_ms;  // else the last `count` recorded at or after since_ms (server clock)
  std::optional<int64_t> until_ms;  // ... and at or before until_ms
};

// The command that reads a lock's history: its last `count` events, newest first (XREVRANGE); or
// with `after` (a stream id), the first `count` after it, oldest first (XRANGE).
// With since_ms or until_ms, the last `count` recorded in that window (XREVRANGE over stream ids,
// which are ms: the server filters).
redis::Command log_range(const LockName& name, const LogRange& range);
inline redis::Command log_range(const LockName& name, size_t count, const std::string& after) {
  LogRange range;
  range.count = count;
  range.after = after;
  return log_range(name, range);
}

// XREAD [BLOCK ms] STREAMS over the history keys of names, each after its id ("0-0": from the start).
redis::Command follow_command(const std::vector<std::pair<LockName, std::string>>& names,
                              std::optional<int64_t> block_ms);
// The events of an XREAD reply (for the locks of names: the reply names their history keys), in
// the reply's order; each stream's last id into last (by KEY).
std::vector<Event> parse_follow(const redis::Reply& reply, const std::vector<std::pair<LockName, std::string>>& names,
                                std::map<std::string, std::string>& last);

// The Cluster hash slot of a Redis key: CRC16 (XMODEM) of its hash tag (or of the whole key
// without one) mod 16384. One XREAD may name streams of one slot only (CROSSSLOT), whichever node
// serves them.
int hash_slot(const std::string& redis_key);

// What an end's outcome says for people when the exit status does not ("stopped at --max-hold");
// "" for a success, a failure and an unknown one.
std::string outcome_text(const std::string& outcome);

// A time given to --since or --until: a duration ago (util::parse_duration, counted back from
// now_ms) or an RFC 3339 / ISO 8601 time: YYYY-MM-DD, optionally followed by T (or a space) and
// hh:mm[:ss[.fff]], and Z or an offset (+hh:mm, +hhmm, +hh); without Z or offset, local time.
// A time of day alone, hh:mm[:ss[.fff]][Z|offset], is today's (the date of now_ms, in UTC), in
// UTC as log prints its times, unless a zone is given.
// In ms since the epoch; nullopt when it is neither.
std::optional<int64_t> parse_log_time(const std::string& text, int64_t now_ms);

// The events of an XRANGE or XREVRANGE reply for the lock KEY, in the reply's order.
std::vector<Event> parse_events(const redis::Reply& reply, const std::string& key);

// Merges the copies of one history read from several masters (a Redlock quorum: each master has
// its own): one event per contender and kind, at the earliest time any master saw it. Oldest first.
std::vector<Event> merge_copies(const std::vector<std::vector<Event>>& copies);

// Whether the event is of the --once-per tick at (ms since the epoch): its tick within half its
// period of it (to the second, for an event that names no period).
bool of_tick(const Event& event, int64_t at);

// Sorts events of several locks by time, oldest first (stable for equal times).
void sort_by_time(std::vector<Event>& events);

// One line for people: time (UTC, with a Z), key (with_key), event, host, pid, user, fence, waited,
// held, exit, by, who held it (busy), command. Quoted text goes through util::printable.
std::string format_event(const Event& event, bool with_key);
// One JSON object: time, key, event, host, pid, user, cmd, fence, waited_ms, held_ms, exit, by,
// holder (busy, overrun: host, pid, cmd, lingering; else null), tick, period_ms.
std::string event_json(const Event& event);

}  // namespace rlock::lock
