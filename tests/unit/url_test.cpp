#include "redis/url.hpp"

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

using rlock::redis::Endpoint;
using rlock::redis::parse_url;

TEST(Url, TcpWithEverything) {
  Endpoint e = parse_url("redis://alice:s%40cret@db.example:6380/3").endpoint;
  EXPECT_EQ(e.kind, Endpoint::Kind::tcp);
  EXPECT_EQ(e.host, "db.example");
  EXPECT_EQ(e.port, 6380);
  EXPECT_EQ(e.user, "alice");
  EXPECT_EQ(e.password, "s@cret");
  EXPECT_TRUE(e.password_in_url);
  EXPECT_EQ(e.db, 3);
}

TEST(Url, Defaults) {
  Endpoint e = parse_url("redis://localhost").endpoint;
  EXPECT_EQ(e.host, "localhost");
  EXPECT_EQ(e.port, 6379);
  EXPECT_EQ(e.db, 0);
  EXPECT_TRUE(e.password.empty());
  EXPECT_EQ(parse_url("redis://h/").endpoint.db, 0);
}

TEST(Url, PasswordOnlyAndIpv6) {
  Endpoint e = parse_url("redis://:pw@[::1]:7000/2").endpoint;
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 7000);
  EXPECT_TRUE(e.user.empty());
  EXPECT_EQ(e.password, "pw");
  EXPECT_EQ(e.display(), "redis://:***@[::1]:7000/2");
}

TEST(Url, APasswordFromElsewhereIsNotShownAsIfInTheUrl) {
  Endpoint e = parse_url("redis://u@h:7000").endpoint;
  e.password = "pw";
  e.password_from = "RLOCK_PASSWORD";
  EXPECT_EQ(e.display(), "redis://u@h:7000");
  e.user.clear();
  EXPECT_EQ(e.display(), "redis://h:7000");
}

TEST(Url, UnixSocket) {
  Endpoint e = parse_url("unix:///run/redis/redis.sock?db=5").endpoint;
  EXPECT_EQ(e.kind, Endpoint::Kind::unix_socket);
  EXPECT_EQ(e.path, "/run/redis/redis.sock");
  EXPECT_EQ(e.db, 5);
  EXPECT_EQ(e.identity(), "unix:/run/redis/redis.sock/5");
}

TEST(Url, DisplayNeverShowsPassword) {
  Endpoint e = parse_url("redis://u:topsecret@h:1/0").endpoint;
  EXPECT_EQ(e.display().find("topsecret"), std::string::npos);
}

TEST(Url, IdentityIgnoresCredentials) {
  EXPECT_EQ(parse_url("redis://a:b@h:1/2").endpoint.identity(), parse_url("redis://h:1/2").endpoint.identity());
  EXPECT_NE(parse_url("redis://h:1/2").endpoint.identity(), parse_url("redis://h:1/3").endpoint.identity());
}

int exit_of(const char* url, std::string* message = nullptr) {
  try {
    parse_url(url);
  } catch (const rlock::Error& e) {
    if (message) *message = e.what();
    return e.exit_code();
  }
  return 0;
}

TEST(Url, MalformedIsConfigError) {
  for (const char* bad :
       {"", "localhost", "http://h", "redis://", "redis://h:", "redis://h:0", "redis://h:65536", "redis://h:port",
        "redis://h/db", "redis://h/-1", "redis://[::1", "redis://[::1]x", "redis://h?x=1", "unix://relative.sock",
        "unix:///s?db=x", "unix:///s?foo=1", "redis://u:%zz@h", "redis://h h"}) {
    EXPECT_EQ(exit_of(bad), rlock::exit_code::k_config) << bad;
  }
}

TEST(Url, Tls) {
  Endpoint e = parse_url("rediss://u:p@cache.example:6380/1").endpoint;
  EXPECT_TRUE(e.tls);
  EXPECT_EQ(e.port, 6380);
  EXPECT_EQ(e.display(), "rediss://u:***@cache.example:6380/1");
  EXPECT_FALSE(parse_url("redis://h").endpoint.tls);
}

TEST(Url, Sentinel) {
  rlock::redis::Url u = parse_url("redis+sentinel://:pw@s1:26380,s2,[::1]:5000/mymaster/4");
  EXPECT_EQ(u.kind, rlock::redis::Url::Kind::sentinel);
  ASSERT_EQ(u.sentinels.size(), 3u);
  EXPECT_EQ(u.sentinels[0].host, "s1");
  EXPECT_EQ(u.sentinels[0].port, 26380);
  EXPECT_EQ(u.sentinels[1].port, 26379);
  EXPECT_EQ(u.sentinels[2].host, "::1");
  EXPECT_EQ(u.sentinels[2].port, 5000);
  EXPECT_EQ(u.master, "mymaster");
  EXPECT_EQ(u.endpoint.db, 4);
  EXPECT_EQ(u.endpoint.password, "pw");
  EXPECT_EQ(u.display().find("pw"), std::string::npos);
}

TEST(Url, MalformedSentinel) {
  for (const char* bad : {"redis+sentinel://", "redis+sentinel://h:1", "redis+sentinel://h:1/", "redis+sentinel:///m",
                          "redis+sentinel://h:1,,h:2/m", "redis+sentinel://h:x/m", "redis+sentinel://h:1/m/x"}) {
    EXPECT_EQ(exit_of(bad), rlock::exit_code::k_config) << bad;
  }
}

TEST(Url, OneUrlHoldsNoSpaceOrComma) {
  // A list of URLs (a Redlock quorum) is split before parsing: what reaches parse_url with a
  // space or a comma is a bad URL, and the message says how to give several.
  for (const char* url : {"redis://a:1,redis://b:2", "redis://a:1 redis://b:2", "redis://a,b"}) {
    std::string message;
    EXPECT_EQ(exit_of(url, &message), rlock::exit_code::k_config);
    EXPECT_NE(message.find("Redlock"), std::string::npos) << message;
  }
}

TEST(Url, ErrorNeverEchoesPassword) {
  std::string message;
  exit_of("redis://u:hunter2@h:notaport", &message);
  EXPECT_EQ(message.find("hunter2"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------------------------
// Malformed URLs, as the command line, RLOCK_URL and the config file give them: each must fail
// while the command line is parsed, before anything connects, with 78 (or 64 from the command
// line) and a message. rlock's one catch prints the message as one "rlock: error: " line (made
// printable); tests/fuzz.bats runs a sample of these through the binary for that.

// Every URL here is invalid however a parser reads it: bad schemes and separators, ports,
// hosts, %-escapes, databases, unix sockets, Sentinel lists, control characters, non-ASCII
// (UTF-8 bytes, written in octal), and huge inputs.
std::vector<std::string> bad_urls() {
  std::vector<std::string> urls = {
      "",
      "://",
      ":",
      "/",
      "//",
      ":///",
      "redis",
      "redis:",
      "redis:/",
      "redis:/127.0.0.1:6379",
      "redis:127.0.0.1:6379",
      "redis//127.0.0.1:6379",
      "redis:\\\\127.0.0.1",
      "127.0.0.1:6379",
      "127.0.0.1",
      "localhost:6379",
      "://127.0.0.1:6379",
      "http://127.0.0.1:6379",
      "https://127.0.0.1:6379",
      "tcp://127.0.0.1:6379",
      "ftp://127.0.0.1",
      "file:///tmp/redis.sock",
      "r://127.0.0.1",
      "redis+unix:///tmp/r.sock",
      "sentinel://127.0.0.1:26379/mymaster",
      "redis-sentinel://127.0.0.1:26379/mymaster",
      "redis+sentinels://127.0.0.1:26379/mymaster",
      "redis+://127.0.0.1",
      "+sentinel://127.0.0.1:26379/m",
      "redis ://127.0.0.1:6379",
      "re dis://127.0.0.1",
      "redis:://127.0.0.1",
      "redis:/ /127.0.0.1",
      "unix:/tmp/redis.sock",
      "unix:tmp/redis.sock",
      "unix//tmp/redis.sock",
      "redi$://127.0.0.1",
      "redis%3A//127.0.0.1",
      "redis%3a%2f%2f127.0.0.1",
      "redis://127.0.0.1:0",
      "rediss://127.0.0.1:0",
      "redis://127.0.0.1:00",
      "rediss://127.0.0.1:00",
      "redis://127.0.0.1:65536",
      "rediss://127.0.0.1:65536",
      "redis://127.0.0.1:65537",
      "rediss://127.0.0.1:65537",
      "redis://127.0.0.1:99999",
      "rediss://127.0.0.1:99999",
      "redis://127.0.0.1:100000",
      "rediss://127.0.0.1:100000",
      "redis://127.0.0.1:-1",
      "rediss://127.0.0.1:-1",
      "redis://127.0.0.1:-6379",
      "rediss://127.0.0.1:-6379",
      "redis://127.0.0.1:-0",
      "rediss://127.0.0.1:-0",
      "redis://127.0.0.1:abc",
      "rediss://127.0.0.1:abc",
      "redis://127.0.0.1:6379a",
      "rediss://127.0.0.1:6379a",
      "redis://127.0.0.1:a6379",
      "rediss://127.0.0.1:a6379",
      "redis://127.0.0.1:6x79",
      "rediss://127.0.0.1:6x79",
      "redis://127.0.0.1:0x1f",
      "rediss://127.0.0.1:0x1f",
      "redis://127.0.0.1:1e3",
      "rediss://127.0.0.1:1e3",
      "redis://127.0.0.1:6379.0",
      "rediss://127.0.0.1:6379.0",
      "redis://127.0.0.1:6 379",
      "rediss://127.0.0.1:6 379",
      "redis://127.0.0.1::6379",
      "rediss://127.0.0.1::6379",
      "redis://127.0.0.1:18446744073709551616",
      "rediss://127.0.0.1:18446744073709551616",
      "redis://127.0.0.1:99999999999999999999999999",
      "rediss://127.0.0.1:99999999999999999999999999",
      "redis://127.0.0.1:",
      "rediss://127.0.0.1:",
      "redis://127.0.0.1:$PORT",
      "rediss://127.0.0.1:$PORT",
      "redis://127.0.0.1:%36379",
      "rediss://127.0.0.1:%36379",
      "redis://[::1]:0",
      "redis+sentinel://127.0.0.1:0/mymaster",
      "redis+sentinel://127.0.0.1:26379,127.0.0.1:0/mymaster",
      "redis://[::1]:65536",
      "redis+sentinel://127.0.0.1:65536/mymaster",
      "redis+sentinel://127.0.0.1:26379,127.0.0.1:65536/mymaster",
      "redis://[::1]:-1",
      "redis+sentinel://127.0.0.1:-1/mymaster",
      "redis+sentinel://127.0.0.1:26379,127.0.0.1:-1/mymaster",
      "redis://[::1]:abc",
      "redis+sentinel://127.0.0.1:abc/mymaster",
      "redis+sentinel://127.0.0.1:26379,127.0.0.1:abc/mymaster",
      "redis://[::1]:",
      "redis+sentinel://127.0.0.1:/mymaster",
      "redis+sentinel://127.0.0.1:26379,127.0.0.1:/mymaster",
      "redis://[::1]:1e3",
      "redis+sentinel://127.0.0.1:1e3/mymaster",
      "redis+sentinel://127.0.0.1:26379,127.0.0.1:1e3/mymaster",
      "redis://",
      "rediss://",
      "redis://:6379",
      "redis:///",
      "redis:///0",
      "redis://:6379/0",
      "redis://user@",
      "redis://user:pw@",
      "redis://user:pw@:6379",
      "redis://@:6379",
      "redis://@/0",
      "redis://user@/0",
      "redis://[",
      "redis://[:6379",
      "redis://[::1",
      "redis://[::1:6379",
      "redis://[]",
      "redis://[]:6379",
      "redis://]",
      "redis://]:6379",
      "redis://127.0.0.1]",
      "redis://127.0.0.1]:6379",
      "redis://[127.0.0.1",
      "redis://[::1]x",
      "redis://[::1]6379",
      "redis://[::1]:",
      "redis://[[::1]]:6379",
      "redis://[::1]]:6379",
      "redis://127.0.0.1:6379:6380",
      "redis://127.0.0.1::6379",
      "redis://::",
      "redis://:",
      "redis://127.0.0.1:6379:",
      "redis://host name:6379",
      "redis://127.0.0.1 :6379",
      "redis://127.0.0.1#frag:6379",
      "redis://127.0.0.1#",
      "redis://127.0.0.1?x:6379",
      "redis://127.0.0.1?",
      "redis://127.0.0.1#x/0",
      "redis://#",
      "redis://?",
      "redis://127.0.0.1\\:6379",
      "redis://127.0.0.1\"",
      "redis://<127.0.0.1>",
      "redis://127.0.0.1|6379",
      "redis://%zz:6379",
      "redis://%:6379",
      "redis://12%7.0.0.1:6379",
      "redis://127.0.0.1%:6379",
      "redis://user:pw@[:6379",
      "redis://user:pw@]:6379",
      "redis://%@127.0.0.1:6379",
      "redis://user:%@127.0.0.1:6379",
      "redis://%%@127.0.0.1:6379",
      "redis://user:%%@127.0.0.1:6379",
      "redis://%z@127.0.0.1:6379",
      "redis://user:%z@127.0.0.1:6379",
      "redis://%zz@127.0.0.1:6379",
      "redis://user:%zz@127.0.0.1:6379",
      "redis://%4@127.0.0.1:6379",
      "redis://user:%4@127.0.0.1:6379",
      "redis://%g0@127.0.0.1:6379",
      "redis://user:%g0@127.0.0.1:6379",
      "redis://us%er@127.0.0.1:6379",
      "redis://user:us%er@127.0.0.1:6379",
      "redis://user%@127.0.0.1:6379",
      "redis://user:user%@127.0.0.1:6379",
      "redis://%-1@127.0.0.1:6379",
      "redis://user:%-1@127.0.0.1:6379",
      "redis://%+1@127.0.0.1:6379",
      "redis://user:%+1@127.0.0.1:6379",
      "redis://% 1@127.0.0.1:6379",
      "redis://user:% 1@127.0.0.1:6379",
      "rediss://%zz:pw@127.0.0.1:6379",
      "redis+sentinel://:%zz@127.0.0.1:26379/mymaster",
      "redis+sentinel://%q@127.0.0.1:26379/mymaster",
      "redis://127.0.0.1:6379/x",
      "redis://127.0.0.1:6379/-1",
      "redis://127.0.0.1:6379/1.5",
      "redis://127.0.0.1:6379/1e3",
      "redis://127.0.0.1:6379/0x10",
      "redis://127.0.0.1:6379/ 1",
      "redis://127.0.0.1:6379/1 2",
      "redis://127.0.0.1:6379/db0",
      "redis://127.0.0.1:6379/0/",
      "redis://127.0.0.1:6379/0/1",
      "redis://127.0.0.1:6379/0//",
      "redis://127.0.0.1:6379/1a",
      "redis://127.0.0.1:6379/\331\241",
      "redis://127.0.0.1:6379/\357\274\220",
      "redis://127.0.0.1:6379/99999999999999999999",
      "redis://127.0.0.1:6379/0?db=x",
      "redis://127.0.0.1:6379/0#",
      "redis://127.0.0.1:6379/0:1",
      "redis://127.0.0.1:6379/-",
      "redis://127.0.0.1:6379/.",
      "redis://127.0.0.1:6379/0/extra/path",
      "rediss://127.0.0.1:6379/x",
      "redis://[::1]:6379/x",
      "redis://127.0.0.1/x",
      "unix://",
      "unix://?db=1",
      "unix://relative.sock",
      "unix://relative/path.sock",
      "unix://?",
      "unix:///tmp/r.sock?db=x",
      "unix:///tmp/r.sock?db=",
      "unix:///tmp/r.sock?db=-1",
      "unix:///tmp/r.sock?db=1.5",
      "unix:///tmp/r.sock?foo=1",
      "unix:///tmp/r.sock?db=1&db=x",
      "unix:///tmp/r.sock?=1",
      "unix:///tmp/r.sock?db",
      "unix:///tmp/r.sock?db=99999999999999999999",
      "unix:///tmp/%zz.sock",
      "unix:///tmp/r.sock%",
      "unix:///tmp/%4.sock",
      "unix://user:%zz@/tmp/r.sock",
      "redis+sentinel://",
      "redis+sentinel://127.0.0.1:26379",
      "redis+sentinel://127.0.0.1:26379/",
      "redis+sentinel://127.0.0.1:26379//",
      "redis+sentinel:///mymaster",
      "redis+sentinel://,/mymaster",
      "redis+sentinel://127.0.0.1:26379,/mymaster",
      "redis+sentinel://,127.0.0.1:26379/mymaster",
      "redis+sentinel://127.0.0.1:26379,,127.0.0.1:26380/mymaster",
      "redis+sentinel://127.0.0.1:26379//mymaster",
      "redis+sentinel://127.0.0.1:26379/mymaster/x",
      "redis+sentinel://127.0.0.1:26379/mymaster/-1",
      "redis+sentinel://127.0.0.1:26379/mymaster/0/1",
      "redis+sentinel://127.0.0.1:26379/mymaster?x",
      "redis+sentinel://127.0.0.1:26379/my#master",
      "redis+sentinel://127.0.0.1:26379/my@master",
      "redis+sentinel://127.0.0.1:26379/my:master",
      "redis+sentinel://[::1/mymaster",
      "redis+sentinel://@/mymaster",
      "redis+sentinel://user:pw@/mymaster",
      "redis+sentinel://:/mymaster",
      "redis+sentinel://127.0.0.1:26379:1/mymaster",
      "redis+sentinel://127.0.0.1:26379/mymaster/1.5",
      "redis+sentinel:/127.0.0.1:26379/mymaster",
      "redis+sentinel:127.0.0.1:26379/mymaster",
      "\001redis://127.0.0.1:6379",
      "re\001dis://127.0.0.1:6379",
      "redis://127.0.0.1\001:6379",
      "redis://127.0.0.1:63\00179",
      "redis://us\001er:pw@127.0.0.1:6379",
      "redis://127.0.0.1:6379/\0010",
      "unix:///tmp/r\001.sock",
      "\011redis://127.0.0.1:6379",
      "re\011dis://127.0.0.1:6379",
      "redis://127.0.0.1\011:6379",
      "redis://127.0.0.1:63\01179",
      "redis://us\011er:pw@127.0.0.1:6379",
      "redis://127.0.0.1:6379/\0110",
      "unix:///tmp/r\011.sock",
      "\012redis://127.0.0.1:6379",
      "re\012dis://127.0.0.1:6379",
      "redis://127.0.0.1\012:6379",
      "redis://127.0.0.1:63\01279",
      "redis://us\012er:pw@127.0.0.1:6379",
      "redis://127.0.0.1:6379/\0120",
      "unix:///tmp/r\012.sock",
      "\015redis://127.0.0.1:6379",
      "re\015dis://127.0.0.1:6379",
      "redis://127.0.0.1\015:6379",
      "redis://127.0.0.1:63\01579",
      "redis://us\015er:pw@127.0.0.1:6379",
      "redis://127.0.0.1:6379/\0150",
      "unix:///tmp/r\015.sock",
      "\033redis://127.0.0.1:6379",
      "re\033dis://127.0.0.1:6379",
      "redis://127.0.0.1\033:6379",
      "redis://127.0.0.1:63\03379",
      "redis://us\033er:pw@127.0.0.1:6379",
      "redis://127.0.0.1:6379/\0330",
      "unix:///tmp/r\033.sock",
      "\177redis://127.0.0.1:6379",
      "re\177dis://127.0.0.1:6379",
      "redis://127.0.0.1\177:6379",
      "redis://127.0.0.1:63\17779",
      "redis://us\177er:pw@127.0.0.1:6379",
      "redis://127.0.0.1:6379/\1770",
      "unix:///tmp/r\177.sock",
      "\010redis://127.0.0.1:6379",
      "re\010dis://127.0.0.1:6379",
      "redis://127.0.0.1\010:6379",
      "redis://127.0.0.1:63\01079",
      "redis://us\010er:pw@127.0.0.1:6379",
      "redis://127.0.0.1:6379/\0100",
      "unix:///tmp/r\010.sock",
      "redis://127.0.0.1:6379\012",
      "redis://127.0.0.1:6379\012rlock: error: fake",
      "\033[31mredis://x",
      "redis+sentinel://127.0.0.1:26379/my\012master",
      "redis+sentinel://127.0.0.1:26379/my\011master",
      "redis://h\303\251llo:6379",
      "redis://\303\274/0",
      "redis://127.0.0.1:\357\274\226\357\274\223\357\274\227\357\274\231",
      "redis://127.0.0.1:\331\246\331\243\331\247\331\251",
      "r\303\251dis://127.0.0.1",
      "redis://127.0.0.1/\331\243",
      "rediss://\346\227\245\346\234\254.example:6379",
      "redis://\360\237\230\200:6379",
      "redis://127.0.0.1:6379/\360\237\230\200",
      "unix:///tmp/r.sock?db=\360\237\230\200",
      "redis+sentinel://127.0.0.1:26379/\360\237\230\200/x",
      "redis://\377\376:6379",
      "redis://127.0.0.1:\300\257",
      "\357\273\277redis://127.0.0.1:6379",
      "redis://127.0.0.1\\u200b:6379",
      "redis://127.0.0.1\342\200\213:6379",
  };
  // Huge inputs (100000 characters; argv takes up to 128 KiB in one argument).
  const std::string::size_type n = 100000;
  std::string sentinels;
  for (int i = 0; i < 3000; ++i) sentinels += "127.0.0.1:26379,";
  for (std::string huge :
       {"redis://" + std::string(n, 'a'), "redis://127.0.0.1:" + std::string(n, '9'),
        "redis://127.0.0.1:6379/" + std::string(n, '9'), "redis://" + std::string(n, 'u') + "@", std::string(n, 'x'),
        "redis://" + std::string(n, '%') + "@127.0.0.1", "redis://127.0.0.1:6379/" + std::string(n, 'x'),
        "redis+sentinel://" + std::string(n, ',') + "/mymaster", "unix:///tmp/r.sock?" + std::string(n, '&') + "db=x",
        "redis://" + std::string(n, '['), "redis+sentinel://" + sentinels + "/mymaster"}) {
    urls.push_back(std::move(huge));
  }
  return urls;
}

// The command line parsed as rlock parses it (cli::parse_command_line), with an empty config
// file and none of rlock's variables but a token (release and extend read one).
class MalformedUrl : public testing::Test {
protected:
  void SetUp() override {
    char path[] = "/tmp/rlock-url-test-XXXXXX";
    int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    m_config = path;
    for (const char* v : {"RLOCK_URL", "REDIS_URL", "RLOCK_PASSWORD", "REDISCLI_AUTH", "RLOCK_PASSWORD_FILE"}) {
      ::unsetenv(v);
    }
    ::setenv("RLOCK_CONFIG", m_config.c_str(), 1);
    ::setenv("RLOCK_TOKEN", "0123456789abcdef0123456789abcdef", 1);
  }
  void TearDown() override {
    for (const char* v : {"RLOCK_CONFIG", "RLOCK_TOKEN", "RLOCK_URL"}) ::unsetenv(v);
    std::remove(m_config.c_str());
  }

  // The commands each URL is tried with, in turn.
  static std::vector<std::string> command(size_t i) {
    static const std::vector<std::vector<std::string>> k_commands = {
        {"status", "k"}, {"run", "k", "--", "true"},  {"acquire", "k"},
        {"list"},        {"release", "k", "--force"}, {"extend", "k"}};
    return k_commands[i % k_commands.size()];
  }

  // The exit code and message of the error that parsing "rlock ARGS" throws (0 when it parses).
  static std::pair<int, std::string> error_of(std::vector<std::string> args) {
    args.insert(args.begin(), "rlock");
    try {
      rlock::cli::parse_command_line(args);
    } catch (const rlock::Error& e) {
      return {e.exit_code(), e.what()};
    }
    return {0, ""};
  }

  // Records a failure unless the error is CODE (or ALSO) with a message that is one line once
  // made printable, as rlock prints it.
  static void expect_error(const std::pair<int, std::string>& error, int code, int also, const std::string& url,
                           const char* from) {
    const auto& [got, message] = error;
    std::string shown = rlock::util::printable(url.substr(0, 120));
    EXPECT_TRUE(got == code || got == also) << from << " '" << shown << "': exit " << got << " (" << message << ")";
    EXPECT_FALSE(message.empty()) << from << " '" << shown << "'";
    EXPECT_EQ(rlock::util::printable(message).find('\n'), std::string::npos) << from << " '" << shown << "'";
  }

  std::string m_config;
};

TEST_F(MalformedUrl, TheTableHas200AndTheCommandsParseWithAGoodUrl) {
  EXPECT_GE(bad_urls().size(), 200u);
  // The same command lines with a good URL parse: the error is the URL's.
  for (size_t i = 0; i < 6; ++i) {
    std::vector<std::string> args = command(i);
    args.insert(args.begin() + 1, {"-u", "redis://127.0.0.1:6379"});
    EXPECT_EQ(error_of(args).first, 0) << args[0];
  }
}

TEST_F(MalformedUrl, InUrlExit78Or64) {
  std::vector<std::string> urls = bad_urls();
  for (size_t i = 0; i < urls.size(); ++i) {
    std::vector<std::string> args = command(i);
    args.insert(args.begin() + 1, {"-u", urls[i]});
    expect_error(error_of(args), rlock::exit_code::k_config, rlock::exit_code::k_usage, urls[i], "--url");
  }
  expect_error(error_of({"status", "k", "--url="}), rlock::exit_code::k_config, rlock::exit_code::k_usage, "",
               "--url=");
}

TEST_F(MalformedUrl, InRlockUrlExit78) {
  std::vector<std::string> urls = bad_urls();
  int checked = 0;
  for (size_t i = 0; i < urls.size(); ++i) {
    // RLOCK_URL is a list separated by spaces or commas: those URLs mean something else there.
    if (urls[i].empty() || urls[i].find_first_of(" ,") != std::string::npos) continue;
    ::setenv("RLOCK_URL", urls[i].c_str(), 1);
    expect_error(error_of(command(i + 1)), rlock::exit_code::k_config, rlock::exit_code::k_config, urls[i],
                 "RLOCK_URL=");
    ++checked;
  }
  EXPECT_GE(checked, 150);
}

TEST_F(MalformedUrl, InTheConfigFileExit78) {
  std::vector<std::string> urls = bad_urls();
  int checked = 0;
  for (size_t i = 0; i < urls.size(); ++i) {
    // A TOML literal string holds anything but ' and line breaks; other control characters are
    // not allowed in TOML strings at all (a different error, also 78).
    if (urls[i].find_first_of("'\n\r") != std::string::npos) continue;
    FILE* f = std::fopen(m_config.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "url = '%s'\n", urls[i].c_str());
    std::fclose(f);
    expect_error(error_of(command(i + 2)), rlock::exit_code::k_config, rlock::exit_code::k_config, urls[i],
                 "config url =");
    ++checked;
  }
  EXPECT_GE(checked, 200);
}
