// The protocol's names (src/lock/protocol.txt, generated lock/protocol.hpp) against what the Lua
// scripts do: their raw replies read by position name, the keys and fields they write, the Lua
// prelude they run with.
#include "lock/protocol.hpp"
#include "lock/scripts.hpp"
#include "protocol.hpp"

#include <algorithm>
#include <set>

namespace rlock::test {
namespace {

namespace protocol = lock::protocol;
namespace reply = protocol::reply;
namespace call = protocol::call;
using redis::Reply;

class NamesTest : public ProtocolTest {
protected:
  // Runs script for contender c as lock/lease.cpp does, and returns its raw reply.
  Reply run(const redis::Script& script, const Contender& c, std::vector<std::string> args) {
    Reply r = node.eval(script, name.script_keys(c.id()), timing.script_args(args));
    EXPECT_FALSE(r.is_error()) << r.str;
    return r;
  }
  Reply acquire_raw(const Contender& c, bool queue) {
    return run(lock::scripts::k_acquire, c, lock::acquire_call(c, queue).args());
  }

  // The element of a raw reply at a payload position.
  static const Reply& at(const Reply& r, size_t position) { return r.elements.at(protocol::header::size + position); }
  static int64_t code_of(const Reply& r) { return r.elements.at(protocol::header::code).integer; }
  template <class Answer>
  static int64_t code(Answer c) {
    return static_cast<int64_t>(c);
  }

  // The field names of a hash (HGETALL).
  std::set<std::string> fields_of(const std::string& key) {
    std::set<std::string> out;
    Reply r = call({"HGETALL", key});
    for (size_t i = 0; i < r.elements.size(); i += 2) out.insert(r.elements[i].str);
    return out;
  }
};

template <size_t N>
std::set<std::string> set_of(const std::array<std::string_view, N>& names) {
  std::set<std::string> out;
  for (std::string_view n : names) out.emplace(n);
  return out;
}

TEST_F(NamesTest, RepliesAreReadByTheirPositionNames) {
  Contender a = contender("101", Mode::exclusive, 1, 20s);
  Reply taken = acquire_raw(a, false);
  ASSERT_EQ(code_of(taken), code(call::acquire::Answer::taken));
  EXPECT_EQ(taken.elements.size(), protocol::header::size + reply::taken::size);
  EXPECT_EQ(taken.elements.at(protocol::header::more).integer, 0);
  EXPECT_EQ(taken.elements.at(protocol::header::push).type, Reply::Type::array);
  EXPECT_EQ(at(taken, reply::taken::fence).number(), std::stoll(call({"GET", name.fence_key()}).str));

  Contender b = contender("102");
  Reply busy = acquire_raw(b, false);
  ASSERT_EQ(code_of(busy), code(call::acquire::Answer::busy));
  EXPECT_EQ(busy.elements.size(), protocol::header::size + reply::busy::size);
  EXPECT_EQ(at(busy, reply::busy::host).text(), "host");
  EXPECT_EQ(at(busy, reply::busy::pid).text(), "101");
  EXPECT_EQ(at(busy, reply::busy::cmd).text(), "cmd 101");
  EXPECT_GT(at(busy, reply::busy::pttl).number(), 10'000);
  EXPECT_LE(at(busy, reply::busy::pttl).number(), 20'000);
  EXPECT_GE(at(busy, reply::busy::now).number(), at(busy, reply::busy::since).number());
  EXPECT_EQ(at(busy, reply::busy::queued).number(), 0);
  EXPECT_EQ(at(busy, reply::busy::lingering).number(), 0);

  Reply waiting = acquire_raw(b, true);
  ASSERT_EQ(code_of(waiting), code(call::acquire::Answer::waiting));
  EXPECT_EQ(at(waiting, reply::waiting::position).number(), 1);
  EXPECT_EQ(at(waiting, reply::waiting::queued).number(), 1);
  EXPECT_EQ(at(waiting, reply::waiting::pid).text(), "101");
  EXPECT_EQ(at(waiting, reply::waiting::cmd).text(), "cmd 101");
  EXPECT_GE(at(waiting, reply::waiting::now).number(), at(waiting, reply::waiting::since).number());
  EXPECT_GE(at(waiting, reply::waiting::since).number(), at(waiting, reply::waiting::held_since).number());
  EXPECT_EQ(at(waiting, reply::waiting::lingering).number(), 0);
  EXPECT_GT(at(waiting, reply::waiting::left).number(), 0) << "the head is told the holder's lease";
  ASSERT_EQ(waiting.elements.size(), protocol::header::size + reply::waiting::watch + 1);
  EXPECT_EQ(at(waiting, reply::waiting::watch).text(), a.id()) << "the head watches the holder";

  Reply extended =
      run(lock::scripts::k_extend, a,
          call::extend{
              .token = a.token, .ttl = "15000", .default_ttl = "30000", .keeper = "", .watched = "", .tick_ran = ""}
              .args());
  ASSERT_EQ(code_of(extended), code(call::extend::Answer::extended));
  EXPECT_EQ(at(extended, reply::extended::ttl).number(), 15'000);
  EXPECT_GT(at(extended, reply::extended::pttl_before).number(), 10'000);
  EXPECT_EQ(at(extended, reply::extended::preempted_by).text(), "");

  lock::Ending ending;
  ending.used = true;
  Reply released = run(lock::scripts::k_release, a, lock::release_call(a.token, ending).args());
  EXPECT_EQ(code_of(released), code(call::release::Answer::released));
  EXPECT_EQ(released.elements.size(), protocol::header::size + reply::released::size);
  Reply not_held = run(lock::scripts::k_release, a, lock::release_call(a.token, ending).args());
  EXPECT_EQ(code_of(not_held), code(call::release::Answer::not_held));
  // The release handed the lock to b: its push names it, and its next step takes it.
  Reply step = run(lock::scripts::k_wait, b, lock::wait_call(b, "").args());
  ASSERT_EQ(code_of(step), code(call::wait::Answer::taken));
  EXPECT_GT(at(step, reply::taken::fence).number(), at(taken, reply::taken::fence).number());

  Reply forced = run(lock::scripts::k_force_release, b, call::force_release{}.args());
  ASSERT_EQ(code_of(forced), code(call::force_release::Answer::forced));
  EXPECT_EQ(at(forced, reply::forced::removed).number(), 1);
  EXPECT_EQ(at(forced, reply::forced::shared).number(), 0);
  const Reply& info = at(forced, reply::forced::info);
  auto pid = std::find_if(info.elements.begin(), info.elements.end(),
                          [](const Reply& f) { return f.str == protocol::info::pid; });
  ASSERT_NE(pid, info.elements.end());
  EXPECT_EQ((pid + 1)->str, "102");
}

TEST_F(NamesTest, SupersededWaiterIsToldToLeaveByName) {
  Contender a = contender("101");
  ASSERT_EQ(code_of(acquire_raw(a, false)), code(call::acquire::Answer::taken));
  Contender b = contender("102");
  ASSERT_EQ(code_of(acquire_raw(b, true)), code(call::acquire::Answer::waiting));
  Contender c = contender("103");
  c.supersede = true;
  Contender d = contender("104");
  d.supersede = true;
  ASSERT_EQ(code_of(acquire_raw(c, true)), code(call::acquire::Answer::waiting));
  ASSERT_EQ(code_of(acquire_raw(d, true)), code(call::acquire::Answer::waiting));
  Reply leave = run(lock::scripts::k_wait, c, lock::wait_call(c, "").args());
  ASSERT_EQ(code_of(leave), code(call::wait::Answer::leave));
  EXPECT_EQ(at(leave, reply::leave::reason).text(), "superseded");
  EXPECT_EQ(lock::parse_who(at(leave, reply::leave::by).text()).pid, "104");
}

// Everything the scripts store is named in the protocol: the keys, the hash fields, the history.
TEST_F(NamesTest, StoredKeysFieldsAndEventsAreTheProtocols) {
  // An exclusive lock: held, waited for, refused, handed on, held by a keeper.
  Contender x = contender("101");
  ASSERT_EQ(acquire(x).outcome, Outcome::acquired);
  Contender waiter = contender("102");
  waiter.supersede = true;
  Attempt queued_at = acquire(waiter);
  ASSERT_EQ(queued_at.outcome, Outcome::queued);
  ASSERT_EQ(acquire(contender("103"), false).outcome, Outcome::busy);
  ASSERT_TRUE(release(x));
  ASSERT_EQ(step(waiter, queued_at).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::extend(node, name, timing, waiter.token, std::nullopt, {lock::KeeperInfo{12, 13}}));
  // A semaphore, held by a keeper.
  Contender keeper = contender("104", Mode::semaphore, 3);
  LockName other{name.prefix, name.key + "-sem"};
  ASSERT_EQ(lock::try_acquire(node, other, timing, keeper, true, {}).outcome, Outcome::acquired);
  ASSERT_TRUE(lock::extend(node, other, timing, keeper.token, std::nullopt, {lock::KeeperInfo{10, 11}}));

  std::set<std::string> suffixes{""};
  for (lock::Part p : protocol::k_parts) suffixes.insert(":" + std::string(protocol::suffix(p)));
  for (lock::Part p : protocol::k_parts_after) suffixes.insert(":" + std::string(protocol::suffix(p)));
  std::set<std::string> seen;
  for (const LockName& n : {name, other}) {
    Reply keys = call({"KEYS", n.prefix + "{" + n.key + "}*"});
    ASSERT_FALSE(keys.elements.empty());
    for (const Reply& k : keys.elements) {
      std::string suffix = k.str.substr(n.lock_key().size());
      std::string mailbox = ":" + std::string(protocol::k_mailbox) + ":";
      if (suffix.compare(0, mailbox.size(), mailbox) == 0) continue;
      EXPECT_TRUE(suffixes.count(suffix)) << k.str << " is no key of the protocol";
      seen.insert(suffix);
    }
  }
  EXPECT_TRUE(seen.count(":" + std::string(protocol::suffix(lock::Part::holders))));
  EXPECT_TRUE(seen.count(":" + std::string(protocol::suffix(lock::Part::log))));

  for (const std::string& f : fields_of(name.info_key())) EXPECT_TRUE(set_of(protocol::info::k_all).count(f)) << f;
  EXPECT_TRUE(fields_of(name.info_key()).count(std::string(protocol::info::watched)));
  for (const std::string& f : fields_of(other.key_of(lock::Part::semaphore))) {
    EXPECT_TRUE(set_of(protocol::sem::k_all).count(f)) << f;
  }
  EXPECT_EQ(fields_of(other.key_of(lock::Part::semaphore)).size(), protocol::sem::k_all.size());
  std::set<std::string> holder_fields;
  for (const std::string& f : fields_of(other.key_of(lock::Part::holder_info))) {
    ASSERT_EQ(f.compare(0, 17, keeper.id() + "."), 0) << f;
    holder_fields.insert(f.substr(17));
  }
  EXPECT_TRUE(holder_fields.count(std::string(protocol::holder::keeper)));
  for (const std::string& f : holder_fields) EXPECT_TRUE(set_of(protocol::holder::k_all).count(f)) << f;

  // A waiter's fields, while it waits (the lock's own holder is gone: wait on the other lock).
  Contender queued = contender("105", Mode::semaphore, 3);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(
        lock::try_acquire(node, other, timing, contender("10" + std::to_string(6 + i), Mode::semaphore, 3), true, {})
            .outcome,
        Outcome::acquired);
  }
  ASSERT_EQ(lock::try_acquire(node, other, timing, queued, true, {}).outcome, Outcome::queued);
  std::set<std::string> waiter_fields;
  for (const std::string& f : fields_of(other.key_of(lock::Part::waiters))) {
    ASSERT_EQ(f.compare(0, 17, queued.id() + "."), 0) << f;
    waiter_fields.insert(f.substr(17));
  }
  EXPECT_TRUE(waiter_fields.count(std::string(protocol::waiter::options)));
  for (const std::string& f : waiter_fields) EXPECT_TRUE(set_of(protocol::waiter::k_all).count(f)) << f;

  std::set<std::string> kinds;
  Reply log = call({"XRANGE", name.log_key(), "-", "+"});
  ASSERT_FALSE(log.elements.empty());
  for (const Reply& entry : log.elements) {
    const auto& f = entry.elements.at(1).elements;
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      EXPECT_TRUE(set_of(protocol::event_field::k_all).count(f[i].str)) << f[i].str;
      if (f[i].str == protocol::event_field::kind) kinds.insert(f[i + 1].str);
    }
  }
  for (const std::string& k : kinds) EXPECT_TRUE(set_of(protocol::event::k_all).count(k)) << k;
  EXPECT_TRUE(kinds.count(std::string(protocol::event::acquired)));
  EXPECT_TRUE(kinds.count(std::string(protocol::event::returned)));
  EXPECT_TRUE(kinds.count(std::string(protocol::event::busy)));
}

// The Lua prelude in front of every script says what the C++ header says.
TEST_F(NamesTest, LuaPreludeAgreesWithTheHeader) {
  for (const redis::Script* s : {&lock::scripts::k_acquire, &lock::scripts::k_wait, &lock::scripts::k_cancel,
                                 &lock::scripts::k_release, &lock::scripts::k_extend, &lock::scripts::k_force_release,
                                 &lock::scripts::k_merge, &lock::scripts::k_advance}) {
    EXPECT_EQ(s->source.substr(0, protocol::k_lua_prelude.size()), protocol::k_lua_prelude) << s->name;
  }
  // The values of one of the prelude's tables (ARGV[1]), sorted; or a number it names.
  std::string body = std::string(protocol::k_lua_prelude) + R"lua(
local tables = {INFO = INFO, WAITER = WAITER, HOLDER = HOLDER, SEM = SEM, TICK = TICK, SUM = SUM, EV = EV,
                EVENT = EVENT}
if tables[ARGV[1]] then
  local out = {}
  for _, v in pairs(tables[ARGV[1]]) do out[#out + 1] = v end
  table.sort(out)
  return out
end
local n = 0
for _ in pairs(KEY) do n = n + 1 end
return {CODE.busy, CODE.taken, CODE.waiting, CODE.again, CODE.leave, CODE.not_held, CODE.rejoined,
        AT.header.code, AT.header.more, AT.header.push, AT.busy.host, AT.busy.lingering, AT.waiting.watch,
        AT.extended.ttl, AT.forced.info, KEY.lock, KEY.mb, n}
)lua";
  auto values = [&](const std::string& table) {
    std::vector<std::string> out;
    for (const Reply& r : call({"EVAL", body, "0", table}).elements) out.push_back(r.str);
    return out;
  };
  auto sorted = [](auto all) {
    std::vector<std::string> out(all.begin(), all.end());
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(values("INFO"), sorted(protocol::info::k_all));
  EXPECT_EQ(values("WAITER"), sorted(protocol::waiter::k_all));
  EXPECT_EQ(values("HOLDER"), sorted(protocol::holder::k_all));
  EXPECT_EQ(values("SEM"), sorted(protocol::sem::k_all));
  EXPECT_EQ(values("TICK"), sorted(protocol::tick::k_all));
  EXPECT_EQ(values("SUM"), sorted(protocol::summary::k_all));
  EXPECT_EQ(values("EV"), sorted(protocol::event_field::k_all));
  EXPECT_EQ(values("EVENT"), sorted(protocol::event::k_all));

  Reply n = call({"EVAL", body, "0", "numbers"});
  ASSERT_EQ(n.elements.size(), 18u) << n.str;
  std::vector<int64_t> got;
  for (const Reply& r : n.elements) got.push_back(r.integer);
  const int64_t h = protocol::header::size + 1;  // Lua counts from 1, after the header
  std::vector<int64_t> want{code(call::acquire::Answer::busy),
                            code(call::acquire::Answer::taken),
                            code(call::acquire::Answer::waiting),
                            code(call::acquire::Answer::again),
                            code(call::wait::Answer::leave),
                            code(call::release::Answer::not_held),
                            code(call::merge::Answer::rejoined),
                            protocol::header::code + 1,
                            protocol::header::more + 1,
                            protocol::header::push + 1,
                            h + static_cast<int64_t>(reply::busy::host),
                            h + static_cast<int64_t>(reply::busy::lingering),
                            h + static_cast<int64_t>(reply::waiting::watch),
                            h + static_cast<int64_t>(reply::extended::ttl),
                            h + static_cast<int64_t>(reply::forced::info),
                            1,
                            static_cast<int64_t>(protocol::k_parts.size() + 2),
                            static_cast<int64_t>(name.script_keys("x").size())};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace rlock::test
