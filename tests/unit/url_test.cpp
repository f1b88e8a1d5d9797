#include "redis/url.hpp"

#include "error.hpp"
#include "exit_code.hpp"

#include <gtest/gtest.h>

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
