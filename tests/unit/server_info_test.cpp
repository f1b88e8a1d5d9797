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

// The eviction check's cache says what the server is (a Cluster node or not), then the policy
// when it can evict locks; a value of an earlier version (the policy alone, or "") says nothing of
// what the server is, and still gives its policy.
TEST(ServerInfo, TheCachedPolicySaysWhetherTheServerIsAClusterNode) {
  using rlock::lock::cached_cluster;
  using rlock::lock::cached_policy;
  ServerFacts plain = parse_info("maxmemory:0\r\nmaxmemory_policy:noeviction\r\nredis_mode:standalone\r\n");
  EXPECT_EQ(cached_policy(plain), "server");
  ServerFacts cluster = parse_info("maxmemory:100\r\nmaxmemory_policy:volatile-lru\r\nredis_mode:cluster\r\n");
  EXPECT_EQ(cached_policy(cluster), "cluster 100 volatile-lru");
  EXPECT_EQ(cached_cluster("server"), false);
  EXPECT_EQ(cached_cluster("server 100 allkeys-lru"), false);
  EXPECT_EQ(cached_cluster("cluster"), true);
  EXPECT_EQ(cached_cluster("cluster 100 volatile-lru"), true);
  EXPECT_EQ(cached_cluster(""), std::nullopt);
  EXPECT_EQ(cached_cluster("100 volatile-lru"), std::nullopt);
}
