#pragma once

#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "redis/connection.hpp"
#include "redis/reply.hpp"

#include <cstdint>
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
  std::string kind;       // acquired, busy, released, returned, lost, superseded, preempted, expired
  Holder holder;
  std::optional<int64_t> fence;
  std::optional<int64_t> waited_ms;
  std::optional<int64_t> held_ms;
  std::string exit_status;  // the command's, when there was one
  std::string by;           // superseded, preempted: the newer request; a forced release: "release --force"
  std::string contender;    // the contender's public id (tells a quorum's copies of one event apart)
  // busy: the --once-per tick already run (ms since the epoch), by the host `by`
  std::optional<int64_t> tick;
};

// The command that reads a lock's history: its last `count` events, newest first (XREVRANGE); or
// with `after` (a stream id), the first `count` after it, oldest first (XRANGE).
redis::Command log_range(const LockName& name, size_t count, const std::string& after);

// The events of an XRANGE or XREVRANGE reply for the lock KEY, in the reply's order.
std::vector<Event> parse_events(const redis::Reply& reply, const std::string& key);

// Merges the copies of one history read from several masters (a Redlock quorum: each master has
// its own): one event per contender and kind, at the earliest time any master saw it. Oldest first.
std::vector<Event> merge_copies(const std::vector<std::vector<Event>>& copies);

// Sorts events of several locks by time, oldest first (stable for equal times).
void sort_by_time(std::vector<Event>& events);

// One line for people: time, key (with_key), event, host, pid, user, fence, waited, held, exit,
// by, command. Quoted text goes through util::printable.
std::string format_event(const Event& event, bool with_key);
// One JSON object: time, key, event, host, pid, user, cmd, fence, waited_ms, held_ms, exit, by, tick.
std::string event_json(const Event& event);

}  // namespace rlock::lock
