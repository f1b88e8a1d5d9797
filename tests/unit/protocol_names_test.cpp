// The protocol's names (src/lock/protocol.txt, generated lock/protocol.hpp) are the scripts' own:
// every field and event it defines is one the scripts use, by its Redis name or by the prelude's.
// (tests/protocol/names_test.cpp checks the other way: what the scripts store is defined there.)
#include "lock/name.hpp"
#include "lock/protocol.hpp"
#include "lock/scripts.hpp"

#include <gtest/gtest.h>

#include <algorithm>

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

// Each value of `fields` is used by the scripts, quoted ('FIELD', or '.FIELD' for a per-id field)
// or by the prelude's name (TABLE.NAME); a field of the record `who` (the holder's identity), by
// the record's helpers (RECORD.who), which read and write its fields together.
template <size_t N, size_t R = 0>
void all_used(const std::array<std::string_view, N>& fields, const std::array<std::string_view, N>& names,
              const char* table, const char* what, const std::array<std::string_view, R>& record = {}) {
  static const std::string text = script_text();
  for (size_t i = 0; i < N; ++i) {
    std::string field(fields[i]);
    bool in_record = std::find(record.begin(), record.end(), fields[i]) != record.end();
    EXPECT_TRUE(has(text, "'" + field + "'") || has(text, "'." + field + "'") ||
                has(text, std::string(table) + "." + std::string(names[i])) || (in_record && has(text, "RECORD.who")))
        << what << " '" << field << "' is defined in src/lock/protocol.txt but no script uses it";
  }
}

TEST(ProtocolNames, EveryFieldAndEventIsOneTheScriptsUse) {
  all_used(protocol::info::k_all, protocol::info::k_names, "INFO", "the :info field", protocol::who_fields::info);
  all_used(protocol::waiter::k_all, protocol::waiter::k_names, "WAITER", "the waiter field",
           protocol::who_fields::waiter);
  all_used(protocol::holder::k_all, protocol::holder::k_names, "HOLDER", "the holder field",
           protocol::who_fields::holder);
  all_used(protocol::sem::k_all, protocol::sem::k_names, "SEM", "the :sem field");
  all_used(protocol::tick::k_all, protocol::tick::k_names, "TICK", "the :tick field");
  all_used(protocol::summary::k_all, protocol::summary::k_names, "SUM", "the :sum field");
  all_used(protocol::event::k_all, protocol::event::k_all, "EVENT", "the event");
  all_used(protocol::event_field::k_all, protocol::event_field::k_names, "EV", "the event field",
           protocol::who_fields::event_field);
}

// common/call.lua takes its table K of keys from the prelude's KEY, whose indices are the protocol's
// keys in LockName::script_keys' order: the lock, its parts (by their suffixes), the caller's
// mailbox, the parts after it.
TEST(ProtocolNames, ScriptKeysAreInTheProtocolsOrder) {
  EXPECT_TRUE(has(script_text(), "local key = C.keys[KEY[name]]"));
  const std::string prelude(protocol::k_lua_prelude);
  EXPECT_TRUE(has(prelude, "local KEY = {lock = 1,"));
  size_t i = 2;
  for (rlock::lock::Part p : protocol::k_parts) {
    std::string decl = " " + std::string(protocol::suffix(p)) + " = " + std::to_string(i++) + ",";
    EXPECT_TRUE(has(prelude, decl)) << decl;
  }
  const size_t mailbox = i++;
  EXPECT_TRUE(has(prelude, " " + std::string(protocol::k_mailbox) + " = " + std::to_string(mailbox)));
  for (rlock::lock::Part p : protocol::k_parts_after) {
    std::string decl = " " + std::string(protocol::suffix(p)) + " = " + std::to_string(i++);
    EXPECT_TRUE(has(prelude, decl)) << decl;
  }
  rlock::lock::LockName name{"p:", "k"};
  EXPECT_EQ(name.script_keys("id").size(), i - 1);
  EXPECT_EQ(name.script_keys("id").at(mailbox - 1), "p:{k}:" + std::string(protocol::k_mailbox) + ":id");
}

}  // namespace
