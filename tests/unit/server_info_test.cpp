#include "lock/server.hpp"

#include <gtest/gtest.h>

using rlock::lock::parse_info;
using rlock::lock::ServerFacts;

TEST(ServerInfo, ReadsTheFactsOfEverySection) {
  ServerFacts f = parse_info(
      "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n\r\n"
      "# Memory\r\nused_memory:1000\r\nmaxmemory:1048576\r\nmaxmemory_policy:volatile-lru\r\n\r\n"
      "# Persistence\r\naof_enabled:1\r\n\r\n# Replication\r\nrole:master\r\n\r\n# Cluster\r\ncluster_enabled:0\r\n");
  EXPECT_EQ(f.version, "7.0.15");
  EXPECT_EQ(f.run_id, "abc123");
  EXPECT_EQ(f.uptime_s, 42);
  EXPECT_EQ(f.maxmemory, 1048576);
  EXPECT_EQ(f.policy, "volatile-lru");
  EXPECT_EQ(f.aof, true);
  EXPECT_EQ(f.role, "master");
  EXPECT_FALSE(f.cluster);
}

TEST(ServerInfo, ClusterModeLastLineWithoutEndAndBadNumbers) {
  ServerFacts f = parse_info("redis_mode:cluster\nuptime_in_seconds:x\naof_enabled:0\nrun_id:r");
  EXPECT_TRUE(f.cluster);
  EXPECT_FALSE(f.uptime_s);
  EXPECT_EQ(f.aof, false);
  EXPECT_EQ(f.run_id, "r");
  EXPECT_TRUE(parse_info("cluster_enabled:1\r\n").cluster);
  ServerFacts none = parse_info("");
  EXPECT_FALSE(none.aof);
  EXPECT_FALSE(none.maxmemory);
  EXPECT_TRUE(none.run_id.empty());
}
