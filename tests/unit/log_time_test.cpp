// --since and --until: a duration ago, or an RFC 3339 / ISO 8601 time; and the command that
// reads such a window of a history.
#include "lock/history.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

using rlock::lock::parse_log_time;

constexpr int64_t k_now = 1'795'747'710'598;  // 2026-11-27T02:48:30.598Z

TEST(LogTime, DurationsCountBackFromNow) {
  EXPECT_EQ(parse_log_time("30s", k_now), k_now - 30'000);
  EXPECT_EQ(parse_log_time("1h30m", k_now), k_now - 5'400'000);
  EXPECT_EQ(parse_log_time("2d", k_now), k_now - 172'800'000);
  EXPECT_EQ(parse_log_time("0", k_now), k_now);
}

TEST(LogTime, Rfc3339InUtcAndWithOffsets) {
  EXPECT_EQ(parse_log_time("2026-11-27T02:48:30.598Z", 0), k_now);
  EXPECT_EQ(parse_log_time("2026-11-27t02:48:30.598z", 0), k_now);
  EXPECT_EQ(parse_log_time("2026-11-27 02:48:30.598Z", 0), k_now);
  EXPECT_EQ(parse_log_time("2026-11-27T03:48:30.598+01:00", 0), k_now);
  EXPECT_EQ(parse_log_time("2026-11-27T03:48:30.598+0100", 0), k_now);
  EXPECT_EQ(parse_log_time("2026-11-26T21:18:30.598-05:30", 0), k_now);
  EXPECT_EQ(parse_log_time("2026-11-27T02:48:30Z", 0), k_now - 598);
  EXPECT_EQ(parse_log_time("2026-11-27T02:48:30.5Z", 0), k_now - 98);
  EXPECT_EQ(parse_log_time("2026-11-27T02:48Z", 0), k_now - 30'598);
  EXPECT_EQ(parse_log_time("2026-11-27Z", 0), k_now - (2 * 3600 + 48 * 60 + 30) * 1000 - 598);
  EXPECT_EQ(parse_log_time("1970-01-01T00:00:00Z", 0), 0);
}

TEST(LogTime, ATimeOfDayAloneIsTodaysInUtc) {
  const int64_t midnight = k_now - (2 * 3600 + 48 * 60 + 30) * 1000 - 598;  // 2026-11-27T00:00Z
  EXPECT_EQ(parse_log_time("04:10", k_now), midnight + (4 * 3600 + 10 * 60) * 1000);
  EXPECT_EQ(parse_log_time("02:48:30.598", k_now), k_now);
  EXPECT_EQ(parse_log_time("02:48:30Z", k_now), k_now - 598);
  EXPECT_EQ(parse_log_time("03:48:30.598+01:00", k_now), k_now);
  EXPECT_EQ(parse_log_time("00:00", k_now), midnight);
  for (const char* text : {"24:00", "04:60", "4:10", "04:10x", "04:1"})
    EXPECT_FALSE(parse_log_time(text, k_now)) << text;
}

TEST(LogTime, WithoutAZoneItIsLocalTime) {
  const char* old = std::getenv("TZ");
  std::string saved = old ? old : "";
  ::setenv("TZ", "XYZ+05", 1);
  ::tzset();
  EXPECT_EQ(parse_log_time("2026-11-26T21:48:30.598", 0), k_now);
  if (old) {
    ::setenv("TZ", saved.c_str(), 1);
  } else {
    ::unsetenv("TZ");
  }
  ::tzset();
}

TEST(LogTime, RefusesWhatIsNeither) {
  for (const char* text :
       {"", "yesterday", "2026-11", "2026-13-01", "2026-11-32", "2026-11-27T25:00Z", "2026-11-27T02:60Z",
        "2026-11-27T02:48:30.Z", "2026-11-27T02:48:30Zjunk", "2026-11-27T02:48:30+1", "2026-11-27T02", "-5m"}) {
    EXPECT_FALSE(parse_log_time(text, k_now)) << text;
  }
}

TEST(LogTime, TheServerFiltersTheWindowByStreamIds) {
  rlock::lock::LockName name{"rlock:", "k"};
  rlock::lock::LogRange range;
  range.count = 5;
  range.since_ms = 1000;
  range.until_ms = 2000;
  EXPECT_EQ(rlock::lock::log_range(name, range),
            (rlock::redis::Command{"XREVRANGE", "rlock:{k}:log", "2000", "1000", "COUNT", "5"}));
  range.until_ms.reset();
  EXPECT_EQ(rlock::lock::log_range(name, range),
            (rlock::redis::Command{"XREVRANGE", "rlock:{k}:log", "+", "1000", "COUNT", "5"}));
  EXPECT_EQ(rlock::lock::log_range(name, 3, "1500-2"),
            (rlock::redis::Command{"XRANGE", "rlock:{k}:log", "1500-3", "+", "COUNT", "3"}));
  EXPECT_EQ(rlock::lock::follow_command({{name, "1500-2"}, {{"rlock:", "new"}, ""}}, 2000),
            (rlock::redis::Command{"XREAD", "COUNT", "1000", "BLOCK", "2000", "STREAMS", "rlock:{k}:log",
                                   "rlock:{new}:log", "1500-2", "0-0"}));
}

TEST(LogTime, HashSlotsAsRedisClusterComputesThem) {
  // CLUSTER KEYSLOT foo, and CRC16/XMODEM's check value ("123456789": 0x31C3).
  EXPECT_EQ(rlock::lock::hash_slot("foo"), 12182);
  EXPECT_EQ(rlock::lock::hash_slot("123456789"), 0x31C3 & 16383);
  EXPECT_EQ(rlock::lock::hash_slot(""), 0);
  EXPECT_EQ(rlock::lock::hash_slot("rlock:{foo}:log"), 12182);
  EXPECT_EQ(rlock::lock::hash_slot("{}foo"), rlock::lock::hash_slot("{}foo"));
  EXPECT_NE(rlock::lock::hash_slot("{}foo"), rlock::lock::hash_slot("foo"));
}

}  // namespace
