#include "lock/holds.hpp"

#include <gtest/gtest.h>

using rlock::lock::format_holds;
using rlock::lock::Hold;
using rlock::lock::parse_holds;
using rlock::lock::tokens_for;

TEST(Holds, RoundTripsAwkwardKeys) {
  std::vector<Hold> holds = {{"rlock:{a b;c\n%}", "t1", 7}, {"my prefix:{x}", "t2", 1}};
  std::vector<Hold> back = parse_holds(format_holds(holds));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].lock_key, "rlock:{a b;c\n%}");
  EXPECT_EQ(back[0].fence, 7);
  EXPECT_EQ(back[1].lock_key, "my prefix:{x}");
  EXPECT_EQ(back[1].token, "t2");
}

TEST(Holds, SkipsMalformedEntries) {
  std::vector<Hold> back = parse_holds("garbage\nkey tok 3\nkey tok notanumber\n%zz t 1\na b c 4");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].token, "tok");
}

TEST(Holds, TokensForMatchTheLockKeyWhateverTheServerIsCalled) {
  // 127.0.0.1 and localhost are one server: the acquire script checks the token itself.
  std::vector<Hold> holds = {{"k", "a", 1}, {"k", "b", 1}, {"j", "c", 1}};
  EXPECT_EQ(tokens_for(holds, "k"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(tokens_for(holds, "x").empty());
}
