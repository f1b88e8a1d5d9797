#pragma once

namespace rlock::lock {

// What a release learned about the hold it gave back.
enum class Released {
  released,  // the token held the lock, and now it does not
  not_held,  // the token no longer held it: it expired, or was taken over (a majority says so)
  unknown,   // too few servers answered to tell (a quorum's masters disagree, or timed out)
};

}  // namespace rlock::lock
