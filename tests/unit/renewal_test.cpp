#include "lock/renewal.hpp"
#include "error.hpp"
#include "fake_backend.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;
using rlock::lock::Extension;
using rlock::lock::HeldLease;
using rlock::lock::LockName;
using rlock::lock::Renewal;
using rlock::lock::Schedule;
using rlock::lock::Timing;
using rlock::util::BootClock;
using rlock::util::Millis;

namespace renewal_test {

const LockName k_name{"rlock:", "k"};
const std::string k_token(48, 'b');

Extension extension(Millis ttl_left_before, Millis ttl) { return Extension{ttl_left_before, ttl, std::nullopt}; }

TEST(Renew, ARenewalCountsFromWhenItWasSent) {
  FakeBackend b{Timing{}};
  b.extend_answers = {[] { return extension(25s, 30s); }};
  auto taken = BootClock::now() - 10s;
  Schedule s(taken, 30s, 5s, 2s, [](uint64_t) -> uint64_t { return 0; });  // no jitter
  HeldLease hold{k_name, k_token, 30s, 42, rlock::lock::KeeperInfo{7, 8}};
  auto before = BootClock::now();
  Renewal r = rlock::lock::renew(b, s, hold);
  EXPECT_EQ(r.outcome, Renewal::Outcome::renewed);
  ASSERT_TRUE(r.extension);
  EXPECT_EQ(r.extension->ttl, 30s);
  EXPECT_GE(s.last_renewal(), before);
  EXPECT_GE(s.next_renewal(), before + 10s);
  ASSERT_EQ(b.extend_calls.size(), 1u);
  EXPECT_EQ(b.extend_calls[0].token, k_token);
  EXPECT_EQ(b.extend_calls[0].ttl, 30s);
  EXPECT_EQ(b.extend_calls[0].fence, 42);
  ASSERT_TRUE(b.extend_calls[0].keeper);
  EXPECT_EQ(b.extend_calls[0].keeper->keeper, 7);
  EXPECT_EQ(b.learn_calls, 1) << "a Cluster's nodes are learnt first";
  // The wait is capped by the attempt's budget, then the cap lifted.
  ASSERT_EQ(b.caps.size(), 2u);
  ASSERT_TRUE(b.caps[0]);
  EXPECT_LE(*b.caps[0], before + 2s + 10ms);
  EXPECT_FALSE(b.caps[1]);
}

TEST(Renew, ALostLockIsLost) {
  FakeBackend b{Timing{}};
  Schedule s(BootClock::now(), 30s, 5s, 2s);
  auto last = s.last_renewal();
  Renewal r = rlock::lock::renew(b, s, HeldLease{k_name, k_token, 30s, 1, std::nullopt});
  EXPECT_EQ(r.outcome, Renewal::Outcome::lost);
  EXPECT_EQ(s.last_renewal(), last);
}

TEST(Renew, AFailureIsNotCountedAndIsRetriedAtOnce) {
  FakeBackend b{Timing{}};
  b.extend_answers = {[]() -> std::optional<Extension> { throw rlock::Error(69, "m1: no reply within 2s"); }};
  auto taken = BootClock::now() - 10s;
  Schedule s(taken, 30s, 5s, 2s);
  Renewal r = rlock::lock::renew(b, s, HeldLease{k_name, k_token, 30s, 1, std::nullopt});
  EXPECT_EQ(r.outcome, Renewal::Outcome::failed);
  EXPECT_EQ(r.error, "m1: no reply within 2s");
  EXPECT_EQ(s.last_renewal(), taken);
  EXPECT_LE(s.next_renewal(), BootClock::now());
  ASSERT_EQ(b.caps.size(), 2u);
  EXPECT_FALSE(b.caps.back()) << "the cap is lifted after a failure too";
}

TEST(Renew, AMasterThatNoMajorityOfSentinelsNamesDoesNotCount) {
  FakeBackend b{Timing{}};
  b.master_confirmed = false;
  b.extend_answers = {[] { return extension(25s, 30s); }};
  auto taken = BootClock::now() - 10s;
  Schedule s(taken, 30s, 5s, 2s);
  Renewal r = rlock::lock::renew(b, s, HeldLease{k_name, k_token, 30s, 1, std::nullopt});
  EXPECT_EQ(r.outcome, Renewal::Outcome::unconfirmed);
  EXPECT_TRUE(r.extension);
  EXPECT_EQ(s.last_renewal(), taken);
}

TEST(Renew, ALeaseShorterThanExpectedOnTheServerIsWarnedAbout) {
  FakeBackend b{Timing{}};
  b.extend_answers = {[] { return extension(5s, 30s); }, [] { return extension(20s, 30s); }};
  Schedule s(BootClock::now() - 10s, 30s, 5s, 2s);
  testing::internal::CaptureStderr();
  EXPECT_EQ(rlock::lock::renew(b, s, HeldLease{k_name, k_token, 30s, 1, std::nullopt}).outcome,
            Renewal::Outcome::renewed);
  std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("clock may have stepped forward"), std::string::npos) << warned;

  // 10s after the renewal, 20s left: as expected.
  Schedule later(BootClock::now() - 10s, 30s, 5s, 2s);
  testing::internal::CaptureStderr();
  rlock::lock::renew(b, later, HeldLease{k_name, k_token, 30s, 1, std::nullopt});
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace renewal_test
