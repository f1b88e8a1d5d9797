// How the scripts reach the server: one function library (FCALL), loaded where it is missing, or
// EVALSHA when the function path is off (RLOCK_FUNCTIONS=0: this suite's second pass).
#include "lock/scripts.hpp"
#include "protocol.hpp"

namespace rlock::test {
namespace {

using FunctionsTest = ProtocolTest;

bool library_loaded(redis::Reply list) {
  for (const redis::Reply& library : list.elements) {
    for (size_t i = 0; i + 1 < library.elements.size(); i += 2) {
      if (library.elements[i].str == "library_name" && library.elements[i + 1].str == lock::scripts::k_library_name) {
        return true;
      }
    }
  }
  return false;
}

long long calls(const redis::Reply& info, const std::string& command) {
  std::string key = "cmdstat_" + command + ":calls=";
  size_t at = info.str.find(key);
  return at == std::string::npos ? 0 : std::stoll(info.str.substr(at + key.size()));
}

TEST_F(FunctionsTest, ScriptsRunAsTheLibraryOrByEvalshaAsTheProcessChose) {
  ASSERT_EQ(call({"CONFIG", "RESETSTAT"}).str, "OK");
  Contender a = contender("101");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_TRUE(release(a));
  redis::Reply info = call({"INFO", "commandstats"});
  if (redis::functions_wanted()) {
    EXPECT_TRUE(library_loaded(call({"FUNCTION", "LIST"})));
    EXPECT_GE(calls(info, "fcall"), 2);  // 3 when the first found no library
    EXPECT_EQ(calls(info, "evalsha") + calls(info, "eval"), 0);
  } else {
    EXPECT_EQ(calls(info, "fcall"), 0);
    EXPECT_EQ(calls(info, "evalsha"), 2);
  }
}

TEST_F(FunctionsTest, ALibraryThatIsGoneIsLoadedAgainMidHold) {
  Contender a = contender("101");
  Contender b = contender("102");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  Attempt queued = acquire(b);
  ASSERT_EQ(queued.outcome, Outcome::queued);
  // A restart without its functions, a failover to a replica that never had them.
  ASSERT_EQ(call({"FUNCTION", "FLUSH"}).str, "OK");
  ASSERT_TRUE(release(a));
  EXPECT_EQ(library_loaded(call({"FUNCTION", "LIST"})), redis::functions_wanted());
  EXPECT_EQ(step(b, queued).outcome, Outcome::acquired);
  LockState s = state();
  ASSERT_EQ(s.holders.size(), 1u);
  EXPECT_EQ(s.holders[0].holder.pid, "102");
}

// The light heartbeat (beat.lua, a function of the library without the shared code, or a script of
// its own) may be the first script a server sees after it lost its functions and scripts.
TEST_F(FunctionsTest, TheLightHeartbeatLoadsItselfWhereTheServerLostIt) {
  Contender a = contender("101"), b = contender("102"), c = contender("103");
  Attempt at = holder_head_and_behind(a, b, c);
  ASSERT_EQ(at.position, 2);
  ASSERT_EQ(call({"FUNCTION", "FLUSH"}).str, "OK");
  ASSERT_EQ(call({"SCRIPT", "FLUSH"}).str, "OK");
  std::string lease_before = call({"ZSCORE", name.lock_key() + ":wl", c.id()}).str;
  std::this_thread::sleep_for(5ms);
  ASSERT_EQ(call({"CONFIG", "RESETSTAT"}).str, "OK");
  Attempt next = step(c, at, 20ms);
  redis::Reply info = call({"INFO", "commandstats"});
  EXPECT_EQ(next.outcome, Outcome::queued);
  EXPECT_EQ(next.epoch, at.epoch) << "the light step: the view kept";
  EXPECT_GT(std::stoll(call({"ZSCORE", name.lock_key() + ":wl", c.id()}).str), std::stoll(lease_before));
  // One call of the light step (the retry after loading aside), and no full step.
  EXPECT_EQ(calls(info, "zrank") + calls(info, "zcard") + calls(info, "hset"), 0) << info.str;
  if (redis::functions_wanted()) {
    EXPECT_TRUE(library_loaded(call({"FUNCTION", "LIST"})));
    EXPECT_EQ(calls(info, "evalsha") + calls(info, "eval"), 0);
  } else {
    EXPECT_EQ(calls(info, "fcall"), 0);
    EXPECT_EQ(calls(info, "eval"), 1) << "loaded by EVAL after NOSCRIPT";
  }
}

TEST_F(FunctionsTest, AnotherVersionsLibraryIsLeftAlone) {
  if (!redis::functions_wanted()) GTEST_SKIP() << "the function path is off";
  redis::Reply other = call({"FUNCTION", "LOAD",
                             "#!lua name=rlock_000000000000\n"
                             "redis.register_function('rlock_000000000000_acquire', "
                             "function(keys, args) return 'other' end)"});
  ASSERT_FALSE(other.is_error()) << other.str;
  Contender a = contender("101");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  ASSERT_TRUE(release(a));
  EXPECT_TRUE(library_loaded(call({"FUNCTION", "LIST"})));
  EXPECT_EQ(call({"FCALL", "rlock_000000000000_acquire", "0"}).str, "other");
}

}  // namespace
}  // namespace rlock::test
