// The fast paths of acquire.lua and release.lua (the common cases, in the fewest commands) leave
// exactly what the full path leaves in the same case: each case runs on two locks, one as it is
// (the fast path) and one with a waiter's notice in :gone, which no fast path takes (the full
// path), with the same contenders; then every key of each lock is compared: its type, whether it
// expires, and its contents, with the times (numbers of 12 digits or more) masked. Not compared:
// :gone, and the mailboxes, which the full path pushes as the notice makes it think someone may
// watch them (with nobody there, nobody can: the fast path pushes none).
#include "lock/lease.hpp"
#include "lock/protocol.hpp"
#include "protocol.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <string>

namespace rlock::test {
namespace {

class FastPathTest : public ProtocolTest {
protected:
  LockName fast{"rlock:", std::string(name.key) + "-fast"};
  LockName full{"rlock:", std::string(name.key) + "-full"};

  // What no fast path takes: a superseded waiter's notice, due long after the test.
  void force_full_path() { call({"ZADD", full.key_of(lock::Part::notices), "99999999999999", "0000000000000000"}); }

  static std::string masked(const std::string& value) {
    static const std::regex time("[0-9]{12,}");
    return std::regex_replace(value, time, "T");
  }
  // A duration in ms (how long a hold was held or a waiter waited) differs by a millisecond or
  // two between the locks: masked too, by its field.
  static bool duration(const std::string& field) {
    namespace ev = lock::protocol::event_field;
    namespace sum = lock::protocol::summary;
    return field == ev::held || field == ev::waited || field == sum::ended_held || field == sum::success_held;
  }

  // Every key of the lock but :gone and the mailboxes, by its name after the lock's key: its
  // type, whether it expires, and its contents (masked).
  std::map<std::string, std::string> keys_of(const LockName& lock) {
    std::map<std::string, std::string> out;
    const std::string base = lock.lock_key();
    const std::string gone = lock.key_of(lock::Part::notices);
    redis::Reply found = call({"KEYS", base + "*"});
    for (const redis::Reply& k : found.elements) {
      const std::string& key = k.str;
      if (key == gone || key.rfind(lock.mailbox(""), 0) == 0) continue;
      std::string type = call({"TYPE", key}).str;
      std::string v = type + (call({"PTTL", key}).integer > 0 ? " expires:" : " stays:");
      if (type == "string") {
        v += masked(call({"GET", key}).str);
      } else if (type == "hash") {
        redis::Reply all = call({"HGETALL", key});
        std::map<std::string, std::string> fields;
        for (size_t i = 0; i + 1 < all.elements.size(); i += 2) {
          const std::string& f = all.elements[i].str;
          fields[masked(f)] = duration(f) ? "D" : masked(all.elements[i + 1].str);
        }
        for (const auto& [f, value] : fields) v += " " + f + "=" + value;
      } else if (type == "stream") {
        for (const redis::Reply& entry : call({"XRANGE", key, "-", "+"}).elements) {
          v += " {";
          const auto& f = entry.elements.at(1).elements;
          for (size_t i = 0; i + 1 < f.size(); i += 2) {
            v += f[i].str + "=" + (duration(f[i].str) ? "D" : masked(f[i + 1].str)) + " ";
          }
          v += "}";
        }
      } else if (type == "zset") {
        v += std::to_string(call({"ZCARD", key}).integer);
      } else if (type == "list") {
        v += std::to_string(call({"LLEN", key}).integer);
      }
      out[key.substr(base.size())] = v;
    }
    return out;
  }

  void expect_same_keys(const std::string& what) {
    auto a = keys_of(fast), b = keys_of(full);
    EXPECT_EQ(a, b) << what;
    EXPECT_FALSE(a.empty()) << what;
  }

  Attempt acquire_on(const LockName& lock, const Contender& c, bool queue) {
    return lock::try_acquire(node, lock, timing, c, queue, {});
  }
  bool release_on(const LockName& lock, const Contender& c, bool used) {
    lock::Ending ending;
    ending.used = used;
    ending.exit_status = used ? "0" : "";
    ending.holder = c.holder;
    ending.linger = 0ms;
    return lock::release(node, lock, timing, c.token, ending);
  }
};

TEST_F(FastPathTest, AnUncontendedAcquireAndReleaseLeaveWhatTheFullPathLeaves) {
  force_full_path();
  for (bool queue : {false, true}) {
    Contender a = contender(queue ? "100" : "101");
    ASSERT_EQ(acquire_on(fast, a, queue).outcome, Outcome::acquired);
    ASSERT_EQ(acquire_on(full, a, queue).outcome, Outcome::acquired);
    expect_same_keys(queue ? "taken (--wait)" : "taken (-n)");
    ASSERT_TRUE(release_on(fast, a, true));
    ASSERT_TRUE(release_on(full, a, true));
    expect_same_keys("released");
  }
}

TEST_F(FastPathTest, ABusyRefusalLeavesWhatTheFullPathLeaves) {
  force_full_path();
  Contender a = contender("100"), b = contender("101");
  ASSERT_EQ(acquire_on(fast, a, false).outcome, Outcome::acquired);
  ASSERT_EQ(acquire_on(full, a, false).outcome, Outcome::acquired);
  Attempt fast_busy = acquire_on(fast, b, false), full_busy = acquire_on(full, b, false);
  ASSERT_EQ(fast_busy.outcome, Outcome::busy);
  ASSERT_EQ(full_busy.outcome, Outcome::busy);
  EXPECT_EQ(fast_busy.holder, full_busy.holder);
  expect_same_keys("busy");
}

TEST_F(FastPathTest, AGiveBackOfAnUnusedHoldLeavesWhatTheFullPathLeaves) {
  force_full_path();
  Contender a = contender("100");
  ASSERT_EQ(acquire_on(fast, a, false).outcome, Outcome::acquired);
  ASSERT_EQ(acquire_on(full, a, false).outcome, Outcome::acquired);
  ASSERT_TRUE(release_on(fast, a, false));
  ASSERT_TRUE(release_on(full, a, false));
  expect_same_keys("given back");
}

}  // namespace
}  // namespace rlock::test
