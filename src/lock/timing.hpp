#pragma once

#include "util/duration.hpp"
#include "util/random.hpp"

#include <string>
#include <vector>

namespace rlock::lock {

// The queue's clock and the history's size, given to every script (scripts/common/call.lua, begin)
// so that the C++ and the Lua sides never disagree on them.
struct Timing {
  util::Millis heartbeat{1'000};                  // a waiter blocks at most this long between steps
  util::Millis lease{3'000};                      // a waiter whose steps stopped this long is dead
  util::Millis claim{2'000};                      // a grant not claimed this long goes to the next waiter
  util::Millis mailbox{10'000};                   // a mailbox push is kept this long
  util::Millis history{31LL * 24 * 3600 * 1000};  // the fence and the log of an idle lock expire after this
  int log_length = 1'000;                         // events kept per lock (0: no history)
  // The client's alone, not the scripts': where the jitter of a waiter's steps comes from (each
  // blocks a heartbeat give or take a random tenth of it).
  util::RandomBelow jitter = util::random_below;
  bool summary = true;  // the lock's summary is kept (PREFIX{KEY}:sum)

  // A waiter behind others (position 2 on) is woken by a push when the one ahead leaves (or is
  // granted the lock and ends its hold); its heartbeat only keeps its place. So it steps less
  // often: 2.5 heartbeats, with as much slack after the step as the head has (lease - heartbeat).
  util::Millis far_heartbeat() const { return heartbeat * 5 / 2; }
  util::Millis far_lease() const { return lease + far_heartbeat() - heartbeat; }

  // The standard timing with log_length events kept.
  static Timing standard(int log_length);
  // The same without history or summary: for calls that only clean up after a failed attempt.
  Timing quiet() const;
  // The arguments every script but the light ones starts with (protocol.txt, config): lease,
  // claim, mailbox, history and keep (ms), log_length, summary (0/1), then args.
  std::vector<std::string> script_args(const std::vector<std::string>& args) const;
};

}  // namespace rlock::lock
