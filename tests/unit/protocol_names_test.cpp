// The protocol's names (src/lock/protocol.txt, generated lock/protocol.hpp) are the scripts' own:
// every field and event it defines is one the scripts use, by its Redis name or by the prelude's.
// (tests/protocol/names_test.cpp checks the other way: what the scripts store is defined there.)
#include "lock/name.hpp"
#include "lock/protocol.hpp"
#include "lock/scripts.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

namespace protocol = rlock::lock::protocol;
namespace scripts = rlock::lock::scripts;

// The scripts' own text: every script without the prelude in front of it.
std::string script_text() {
  std::string text;
  for (const rlock::redis::Script* s :
       {&scripts::k_acquire, &scripts::k_wait, &scripts::k_cancel, &scripts::k_release, &scripts::k_extend,
        &scripts::k_force_release, &scripts::k_merge, &scripts::k_advance}) {
    EXPECT_EQ(s->source.substr(0, protocol::k_lua_prelude.size()), protocol::k_lua_prelude) << s->name;
    text += s->source.substr(protocol::k_lua_prelude.size());
    text += '\n';
  }
  return text;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Each value of `fields` is used by the scripts, quoted ('FIELD', or '.FIELD' for a per-id field).
template <size_t N>
void all_used(const std::array<std::string_view, N>& fields, const char* what) {
  static const std::string text = script_text();
  for (std::string_view f : fields) {
    std::string field(f);
    EXPECT_TRUE(has(text, "'" + field + "'") || has(text, "'." + field + "'"))
        << what << " '" << field << "' is defined in src/lock/protocol.txt but no script uses it";
  }
}

TEST(ProtocolNames, EveryFieldAndEventIsOneTheScriptsUse) {
  all_used(protocol::info::k_all, "the :info field");
  all_used(protocol::waiter::k_all, "the waiter field");
  all_used(protocol::holder::k_all, "the holder field");
  all_used(protocol::sem::k_all, "the :sem field");
  all_used(protocol::tick::k_all, "the :tick field");
  all_used(protocol::summary::k_all, "the :sum field");
  all_used(protocol::event::k_all, "the event");
  all_used(protocol::event_field::k_all, "the event field");
}

// While common.lua declares its table K of keys as NAME = KEYS[i], those are the protocol's keys
// in its order: the lock, its parts (by their suffixes), the caller's mailbox, the parts after it.
TEST(ProtocolNames, ScriptKeysAreInTheProtocolsOrder) {
  const std::string text = script_text();
  if (!has(text, "= KEYS[")) GTEST_SKIP() << "common.lua no longer declares K as NAME = KEYS[i]";
  EXPECT_TRUE(has(text, "lock = KEYS[1]"));
  size_t i = 2;
  for (rlock::lock::Part p : protocol::k_parts) {
    std::string decl = std::string(protocol::suffix(p)) + " = KEYS[" + std::to_string(i++) + "]";
    EXPECT_TRUE(has(text, decl)) << decl;
  }
  const size_t mailbox = i++;
  EXPECT_TRUE(has(text, std::string(protocol::k_mailbox) + " = KEYS[" + std::to_string(mailbox) + "]"));
  for (rlock::lock::Part p : protocol::k_parts_after) {
    std::string decl = std::string(protocol::suffix(p)) + " = KEYS[" + std::to_string(i++) + "]";
    EXPECT_TRUE(has(text, decl)) << decl;
  }
  rlock::lock::LockName name{"p:", "k"};
  EXPECT_EQ(name.script_keys("id").size(), i - 1);
  EXPECT_EQ(name.script_keys("id").at(mailbox - 1), "p:{k}:" + std::string(protocol::k_mailbox) + ":id");
}

}  // namespace
