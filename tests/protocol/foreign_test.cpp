// Another program's data at the lock's key: every call refuses it (Error 65) and leaves it as it
// was, whatever the shape of the data.
#include "protocol.hpp"

#include <cctype>

namespace rlock::test {
namespace {

class ForeignTest : public ProtocolTest {
protected:
  // The exit code of f, 0 when it threw nothing.
  static int code_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.exit_code();
    }
    return 0;
  }

  // Every lock:: call on the lock, by newcomers (their tokens own nothing), fails with 65 and
  // leaves the lock's key as it found it.
  void expect_every_call_refused() {
    const std::string type = call({"TYPE", name.lock_key()}).str;
    const std::string value = type == "string" ? call({"GET", name.lock_key()}).str : "";
    const int64_t pttl = call({"PTTL", name.lock_key()}).integer;

    Contender c = contender("101");
    EXPECT_EQ(code_of([&] { acquire(c, false); }), 65) << "try_acquire -n";
    EXPECT_EQ(code_of([&] { acquire(c, true); }), 65) << "try_acquire";
    EXPECT_EQ(code_of([&] { lock::wait_turn(node, name, timing, c, Attempt{}, 20ms); }), 65) << "wait_turn";
    EXPECT_EQ(code_of([&] { release(c); }), 65) << "release";
    lock::Ending used;
    used.used = true;
    used.linger = 5s;
    EXPECT_EQ(code_of([&] { lock::release(node, name, timing, c.token, used); }), 65) << "release of a used hold";
    EXPECT_EQ(code_of([&] { lock::extend(node, name, timing, c.token, std::nullopt); }), 65) << "extend";
    EXPECT_EQ(code_of([&] { lock::extend(node, name, timing, c.token, Millis(20'000)); }), 65) << "extend -t";
    EXPECT_EQ(code_of([&] { state(); }), 65) << "inspect";
    EXPECT_EQ(code_of([&] { lock::force_release(node, name, timing); }), 65) << "release --force";

    EXPECT_EQ(call({"TYPE", name.lock_key()}).str, type) << "left as it was";
    if (type == "string") {
      EXPECT_EQ(call({"GET", name.lock_key()}).str, value) << "left as it was";
    }
    const int64_t after = call({"PTTL", name.lock_key()}).integer;
    if (pttl < 0) {
      EXPECT_EQ(after, pttl) << "no expiry was set on it";
    } else {
      EXPECT_GT(after, 0);
      EXPECT_LE(after, pttl);
    }
    EXPECT_EQ(call({"EXISTS", name.key_of(lock::Part::queue)}).integer, 0) << "nobody queued";
  }

  // A well-formed token of nobody's.
  static std::string stranger() { return lock::new_token(); }
};

TEST_F(ForeignTest, APlainStringWithoutExpiryIsRefused) {
  ASSERT_EQ(call({"SET", name.lock_key(), "some value"}).str, "OK");
  expect_every_call_refused();
}

TEST_F(ForeignTest, ATokenShapedStringWithoutExpiryIsRefused) {
  ASSERT_EQ(call({"SET", name.lock_key(), stranger()}).str, "OK");
  expect_every_call_refused();
}

TEST_F(ForeignTest, AStringOfTheWrongShapeIsRefusedEvenWithAnExpiry) {
  // Almost a token: 48 characters, but not lower-case hex; and almost a lingering mark.
  std::string upper = stranger();
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  for (const std::string& v : {std::string("some value"), upper, stranger().substr(0, 47),
                               "~" + stranger().substr(0, 15), "~" + stranger().substr(0, 16) + "0"}) {
    SCOPED_TRACE(v);
    ASSERT_EQ(call({"SET", name.lock_key(), v, "PX", "60000"}).str, "OK");
    expect_every_call_refused();
  }
}

TEST_F(ForeignTest, AValueWhoseIdIsNotTheOneItsInfoNamesIsRefused) {
  Contender a = contender("100");
  ASSERT_EQ(acquire(a).outcome, Outcome::acquired);
  // Another program wrote over the token (its expiry kept): :info still names a's id.
  std::string other = stranger();
  ASSERT_EQ(call({"SET", name.lock_key(), other, "KEEPTTL"}).str, "OK");
  expect_every_call_refused();
  // A lingering mark of another id likewise.
  ASSERT_EQ(call({"SET", name.lock_key(), "~" + lock::id_of(other), "PX", "60000"}).str, "OK");
  expect_every_call_refused();
  // The holder's own token is refused too: its key is not what it wrote.
  EXPECT_EQ(code_of([&] { release(a); }), 65);
}

TEST_F(ForeignTest, AnotherTypeAtTheLockIsRefusedByEveryCall) {
  ASSERT_EQ(call({"HSET", name.lock_key(), "f", "v"}).integer, 1);
  expect_every_call_refused();
  ASSERT_EQ(call({"DEL", name.lock_key()}).integer, 1);
  ASSERT_EQ(call({"RPUSH", name.lock_key(), "x"}).integer, 1);
  expect_every_call_refused();
}

// Another program's data at the fence counter: the attempt is refused, and takes nothing (the
// lean path took the free key before it counted: it gives it back).
TEST_F(ForeignTest, AnotherTypeAtTheFenceCounterIsRefusedAndTakesNothing) {
  call({"HSET", name.fence_key(), "a", "b"});
  Contender c = contender("101");
  EXPECT_EQ(code_of([&] { acquire(c, false); }), 65) << "try_acquire -n";
  EXPECT_EQ(code_of([&] { acquire(c, true); }), 65) << "try_acquire";
  EXPECT_EQ(call({"EXISTS", name.lock_key(), name.info_key(), name.log_key()}).integer, 0) << "nothing taken";
  EXPECT_EQ(call({"HGET", name.fence_key(), "a"}).str, "b") << "left as it was";
}

}  // namespace
}  // namespace rlock::test
