#include "lock/holds.hpp"

#include <gtest/gtest.h>

using rlock::lock::format_holds;
using rlock::lock::Hold;
using rlock::lock::parse_holds;
using rlock::lock::tokens_for;

namespace {

Hold hold(std::string key, std::string token, int64_t fence) {
  return {std::move(key), std::move(token), fence, "0f1e2d3c-boot", 4242, 987654321};
}

}  // namespace

TEST(Holds, RoundTripsAwkwardKeysAndTheAnchor) {
  std::vector<Hold> holds = {hold("rlock:{a b;c\n%}", "t1", 7), hold("my prefix:{x}", "t2", 1)};
  std::vector<Hold> back = parse_holds(format_holds(holds));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].lock_key, "rlock:{a b;c\n%}");
  EXPECT_EQ(back[0].fence, 7);
  EXPECT_EQ(back[0].boot_id, "0f1e2d3c-boot");
  EXPECT_EQ(back[0].anchor, 4242);
  EXPECT_EQ(back[0].anchor_start, 987654321u);
  EXPECT_EQ(back[1].lock_key, "my prefix:{x}");
  EXPECT_EQ(back[1].token, "t2");
}

TEST(Holds, SkipsMalformedEntriesAndHoldsWithoutAnAnchor) {
  // The three-field form of earlier versions names no holding process: it cannot be checked
  // against the process tree, so it grants nothing.
  std::vector<Hold> back = parse_holds(
      "garbage\nkey tok 3\nkey tok 3 boot 0 1\nkey tok notanumber boot 1 1\n%zz t 1 boot 1 1\nk tok 3 boot 12 34");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].token, "tok");
  EXPECT_EQ(back[0].anchor, 12);
}

TEST(Holds, TokensForMatchTheLockKeyInOrder) {
  // 127.0.0.1 and localhost are one server: the acquire script checks the token itself, and
  // says which of the tokens matched.
  std::vector<Hold> holds = {hold("k", "a", 1), hold("k", "b", 1), hold("j", "c", 1)};
  EXPECT_EQ(tokens_for(holds, "k"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(tokens_for(holds, "x").empty());
}
