#include "cli/config_file.hpp"

#include "cli/parse.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "util/text.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

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

namespace {

// The malformed config files: a name and the file's bytes. Those about another file that the
// config names (a password file, a CA) use DIR for the missing file's directory.
std::vector<std::pair<std::string, std::string>> bad_configs(const std::string& dir) {
  using namespace std::string_literals;
  std::vector<std::pair<std::string, std::string>> files = {
      {"no-value", "ttl =\n"},
      {"no-equals", "ttl\n"},
      {"no-name", "= \"5s\"\n"},
      {"unterminated-basic", "ttl = \"5s\n"},
      {"unterminated-literal", "ttl = '5s\n"},
      {"table", "[rlock]\nttl = \"5s\"\n"},
      {"array-of-tables", "[[rlock]]\n"},
      {"table-after", "ttl = \"5s\"\n[other]\n"},
      {"duplicate", "ttl = \"5s\"\nttl = \"6s\"\n"},
      {"duplicate-spelling", "kill-after = \"1s\"\nkill_after = \"2s\"\n"},
      {"unknown-setting", "no-such-setting = 1\n"},
      {"unknown-upper", "TTL = \"5s\"\n"},
      {"dotted-key", "rlock.ttl = \"5s\"\n"},
      {"space-in-name", "t t l = \"5s\"\n"},
      {"bad-duration", "ttl = \"abc\"\n"},
      {"zero-ttl", "ttl = 0\n"},
      {"negative-ttl", "ttl = -5\n"},
      {"unit-parsec", "max-hold = \"1parsec\"\n"},
      {"bare-word", "ttl = 5s\n"},
      {"array-value", "ttl = [1, 2]\n"},
      {"inline-table", "ttl = { a = 1 }\n"},
      {"text-after-value", "ttl = \"5s\" extra\n"},
      {"bad-escape", "ttl = \"\\q\"\n"},
      {"triple-quotes", "ttl = \"\"\"5s\"\"\"\n"},
      {"url-number", "url = 5\n"},
      {"url-bool", "url = true\n"},
      {"url-bad", "url = \"ftp://127.0.0.1\"\n"},
      {"url-port-0", "url = \"redis://127.0.0.1:0\"\n"},
      {"quiet-maybe", "quiet = \"maybe\"\n"},
      {"verbose-2", "verbose = 2\n"},
      {"insecure-words", "insecure = \"yes please\"\n"},
      {"exit-code-256", "conflict-exit-code = 256\n"},
      {"exit-code-text", "conflict-exit-code = \"x\"\n"},
      {"lost-exit-negative", "lost-exit-code = -1\n"},
      {"signal-unknown", "signal = \"NOSUCHSIG\"\n"},
      {"kill-after-forever", "kill-after = \"forever\"\n"},
      {"timeout-zero", "timeout = \"0s\"\n"},
      {"connect-timeout-negative", "connect-timeout = \"-1s\"\n"},
      {"wait-replicas-negative", "wait-replicas = -1\n"},
      {"wait-replicas-text", "wait-replicas = \"x\"\n"},
      {"wait-timeout-bad", "wait-timeout = \"soon\"\n"},
      {"password-file-missing", "password-file = \"" + dir + "/no-such-password-file\"\n"},
      {"cacert-missing", "url = \"rediss://127.0.0.1:1\"\ncacert = \"" + dir + "/no-such-ca.pem\"\n"},
      {"control-char", "ttl = \"5\x01s\"\n"},
      {"newline-in-string", "ttl = \"5\ns\"\n"},
      {"nul-byte", "ttl = \"5s\"\0\n"s},
      {"binary", "\0\x01\x02\xff\xfe\x80garbage\x7f\n"s},
      {"invalid-utf8", "\xff\xfe=\xc0\xaf\n"},
      {"too-large", std::string(2'000'000, '#')},
      {"long-value", "ttl = \"" + std::string(500'000, 'a') + "\"\n"},
      {"long-name", std::string(300'000, 'a')},
  };
  std::string many;
  for (int i = 1; i <= 5000; ++i) many += "ttl = \"" + std::to_string(i) + "s\"\n";
  files.emplace_back("many-duplicates", many);
  return files;
}

}  // namespace

// Every malformed config file, given with --config, fails while the command line is parsed with
// 78 and a one-line message that names the file (unless it is about another file the config
// names). tests/fuzz.bats runs a sample of them through the binary, by --config, RLOCK_CONFIG
// and the default path.
TEST(ConfigFile, EveryMalformedFileExits78NamingIt) {
  char dir[] = "/tmp/rlock-config-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/config.toml";
  ::unsetenv("RLOCK_CONFIG");
  std::vector<std::pair<std::string, std::string>> files = bad_configs(dir);
  EXPECT_GE(files.size(), 40u);
  for (const auto& [name, text] : files) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    int code = 0;
    std::string message;
    try {
      rlock::cli::parse_command_line({"rlock", "run", "k", "--config", path, "--", "true"});
    } catch (const rlock::Error& e) {
      code = e.exit_code();
      message = e.what();
    }
    EXPECT_EQ(code, rlock::exit_code::k_config) << name << ": " << message;
    EXPECT_EQ(rlock::util::printable(message).find('\n'), std::string::npos) << name;
    if (name != "password-file-missing" && name != "cacert-missing") {
      EXPECT_NE(message.find(path), std::string::npos) << name << ": the error does not name the file: " << message;
    }
  }
  std::remove(path.c_str());
  ::rmdir(dir);
}
