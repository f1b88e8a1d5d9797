#include "util/duration.hpp"

#include <gtest/gtest.h>

using rlock::util::format_duration;
using rlock::util::Millis;
using rlock::util::parse_duration;

TEST(Duration, ParsesUnitsAndCompounds) {
  EXPECT_EQ(parse_duration("500ms"), Millis(500));
  EXPECT_EQ(parse_duration("30s"), Millis(30'000));
  EXPECT_EQ(parse_duration("5m"), Millis(300'000));
  EXPECT_EQ(parse_duration("1h30m"), Millis(5'400'000));
  EXPECT_EQ(parse_duration("1.5s"), Millis(1'500));
  EXPECT_EQ(parse_duration("2d"), Millis(172'800'000));
  EXPECT_EQ(parse_duration("1m30s500ms"), Millis(90'500));
}

TEST(Duration, BareNumberIsSeconds) {
  EXPECT_EQ(parse_duration("2"), Millis(2'000));
  EXPECT_EQ(parse_duration("0.25"), Millis(250));
  EXPECT_EQ(parse_duration("0"), Millis(0));
}

TEST(Duration, RejectsGarbageWithReason) {
  for (const char* bad : {"", "-5s", "1x", "s", "ms", "1.2.3s", "1s2", "abc", ".", "1 s", "5mm", "1e3"}) {
    std::string why;
    EXPECT_FALSE(parse_duration(bad, &why).has_value()) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

TEST(Duration, RejectsAbsurdlyLong) { EXPECT_FALSE(parse_duration("99999999999999999999h").has_value()); }

TEST(Duration, FormatsForPeople) {
  EXPECT_EQ(format_duration(Millis(250)), "250ms");
  EXPECT_EQ(format_duration(Millis(1500)), "1.5s");
  EXPECT_EQ(format_duration(Millis(30'000)), "30s");
  EXPECT_EQ(format_duration(Millis(5'400'000)), "1h30m");
  EXPECT_EQ(format_duration(Millis(192'000)), "3m12s");
}
