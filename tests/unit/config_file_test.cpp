#include "cli/config_file.hpp"

#include "error.hpp"

#include <gtest/gtest.h>

using rlock::cli::parse_config;

TEST(ConfigFile, ReadsTheTomlSubset) {
  auto v = parse_config(
      "# comment\n\nurl = \"redis://u:p#ss@h:1/2\"  # trailing\nkill_after = '3s'\nttl=45\nverbose = true\n", "c.toml");
  EXPECT_EQ(v.at("url"), "redis://u:p#ss@h:1/2");
  EXPECT_EQ(v.at("kill-after"), "3s");
  EXPECT_EQ(v.at("ttl"), "45");
  EXPECT_EQ(v.at("verbose"), "true");
}

TEST(ConfigFile, EscapesInBasicStrings) {
  EXPECT_EQ(parse_config("prefix = \"a\\\"b\\\\c\"", "c").at("prefix"), "a\"b\\c");
}

TEST(ConfigFile, RejectsWithFileAndLine) {
  for (const char* bad : {"ttl", "ttl =", "= 3", "ttl = 30s", "[run]\nttl = '1s'", "ttl = \"open", "ttl = '1s' x",
                          "ttl = '1s'\nttl = '2s'", "bad name = 1", "ttl = \"\\q\""}) {
    try {
      parse_config(bad, "conf.toml");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const rlock::Error& e) {
      EXPECT_EQ(e.exit_code(), 78) << bad;
      EXPECT_EQ(std::string(e.what()).rfind("conf.toml:", 0), 0u) << e.what();
    }
  }
}
