#include "lock/holds.hpp"

#include <gtest/gtest.h>

using rlock::lock::format_holds;
using rlock::lock::Hold;
using rlock::lock::parse_holds;
using rlock::lock::tokens_for;

TEST(Holds, RoundTripsAwkwardKeys) {
  std::vector<Hold> holds = {{"tcp:127.0.0.1:6379/0", "rlock:{a b;c\n%}", "t1", 7},
                             {"unix:/tmp/my sock/0", "rlock:{x}", "t2", 1}};
  std::vector<Hold> back = parse_holds(format_holds(holds));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].lock_key, "rlock:{a b;c\n%}");
  EXPECT_EQ(back[0].fence, 7);
  EXPECT_EQ(back[1].server, "unix:/tmp/my sock/0");
  EXPECT_EQ(back[1].token, "t2");
}

TEST(Holds, SkipsMalformedEntries) {
  std::vector<Hold> back = parse_holds("garbage\nsrv key tok 3\nsrv key tok notanumber\n%zz k t 1");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].token, "tok");
}

TEST(Holds, TokensForMatchTheLockKeyWhateverTheServerIsCalled) {
  // 127.0.0.1 and localhost are one server: the acquire script checks the token itself.
  std::vector<Hold> holds = {{"tcp:127.0.0.1:6379/0", "k", "a", 1}, {"tcp:localhost:6379/0", "k", "b", 1},
                             {"tcp:127.0.0.1:6379/0", "j", "c", 1}};
  EXPECT_EQ(tokens_for(holds, "tcp:localhost:6379/0", "k"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(tokens_for(holds, "tcp:localhost:6379/0", "x").empty());
}
