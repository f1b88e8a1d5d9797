#pragma once

// What a row of the option table is (the table itself is in commands/options.hpp, next to the
// option structs its rows fill). A row says everything rlock knows about one option: its names,
// the commands it belongs to, its value's type, variable, config key, help and default, and the
// field it fills. cli/ turns the table into CLI11's options, the settings the environment and the
// config file may give, `--dump-options`, and, for a row with a field, the field's value, checked
// and converted by the field's C++ type: nothing else is written per option.

#include "util/duration.hpp"

#include <array>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

namespace rlock::commands {

// The commands, in the order `rlock --help` lists them.
struct Command {
  const char* name;
  const char* summary;
};
inline constexpr std::array<Command, 9> k_commands = {{
    {"run", "take KEY, run a command while renewing it, release it"},
    {"acquire", "take KEY and keep it after rlock exits; print the token"},
    {"release", "give KEY back (token from --token-file or $RLOCK_TOKEN)"},
    {"extend", "reset KEY's TTL (token from --token-file or $RLOCK_TOKEN)"},
    {"status", "who holds KEY: host, pid, user, command, since, TTL, fence"},
    {"list", "the held locks under the prefix (SCAN)"},
    {"log", "who held, waited for, skipped or lost KEY, from every host"},
    {"check", "a monitoring check of KEY (Nagios plugin convention: exit 0-3)"},
    {"metrics", "the locks' state and outcomes as Prometheus metrics"},
}};

// The commands an option belongs to: one bit per command of k_commands, in their order, or
// global (every command, before or after its name).
using Commands = unsigned;
namespace on {
inline constexpr Commands run = 1U << 0U, acquire = 1U << 1U, release = 1U << 2U, extend = 1U << 3U, status = 1U << 4U,
                          list = 1U << 5U, log = 1U << 6U, check = 1U << 7U, metrics = 1U << 8U;
inline constexpr Commands take = run | acquire;  // how to take a lock
inline constexpr Commands global = 1U << 9U;
}  // namespace on

enum class Kind { flag, value };

// What CLI11's help and version flags are; rlock registers the others.
enum class Builtin { none, help, version };

// What a field's value is, from the field's C++ type: bool is a flag (true when given; "true",
// "yes", "1"... from the environment or the config file), std::string the text as given,
// util::Millis (or an optional one) a duration, an integer a number.
enum class Type { flag, text, duration, number };

// The limits a value must keep. number: min-max, and words say what it counts ("a number of
// holders in 1-1000000"). duration: more than zero unless zero_ok, and at least min ms.
struct Check {
  long long min = 0;
  long long max = 0;
  const char* words = "a number";
  bool zero_ok = false;
  bool unit = false;  // a duration: a bare number (seconds elsewhere) is refused, its unit asked for
};

// A value, converted and checked, for Field::set.
using Converted = std::variant<bool, std::string, util::Millis, long long>;

// The field a row fills: which option struct it is in (owner, compared with owner_of<S>), its
// type, how to store a converted value in it, and its initializer as --help words a default
// ("30s", "75", "rlock:"), or "" when it has no value to show (false, 0, empty, nullopt): then
// the row words the default.
struct Field {
  const void* owner = nullptr;
  Type type = Type::text;
  void (*set)(void* options, const Converted& value) = nullptr;
  std::string (*initial)() = nullptr;
  const void* member = nullptr;  // which member it is, compared with member_of<M>
};

template <class S>
inline constexpr char owner_tag = 0;
// The owner of the fields of struct S.
template <class S>
constexpr const void* owner_of() {
  return &owner_tag<S>;
}

template <auto M>
inline constexpr char member_tag = 0;
// The field M (&RunOptions::kill_after), to pick out its row.
template <auto M>
constexpr const void* member_of() {
  return &member_tag<M>;
}

namespace detail {
template <class M>
struct Member;
template <class S, class T>
struct Member<T S::*> {
  using Owner = S;
  using Value = T;
};
}  // namespace detail

// The field M (&RunOptions::max_hold): its type from its C++ type.
template <auto M>
constexpr Field field() {
  using S = typename detail::Member<decltype(M)>::Owner;
  using T = typename detail::Member<decltype(M)>::Value;
  constexpr bool duration = std::is_same_v<T, util::Millis> || std::is_same_v<T, std::optional<util::Millis>>;
  static_assert(std::is_same_v<T, bool> || std::is_same_v<T, std::string> || duration || std::is_integral_v<T>,
                "a field is bool, std::string, util::Millis, std::optional<util::Millis> or an integer");
  Field f;
  f.owner = owner_of<S>();
  f.member = member_of<M>();
  if constexpr (std::is_same_v<T, bool>) {
    f.type = Type::flag;
  } else if constexpr (std::is_same_v<T, std::string>) {
    f.type = Type::text;
  } else if constexpr (duration) {
    f.type = Type::duration;
  } else {
    f.type = Type::number;
  }
  f.set = [](void* options, const Converted& value) {
    T& to = static_cast<S*>(options)->*M;
    if constexpr (std::is_same_v<T, bool>) {
      to = std::get<bool>(value);
    } else if constexpr (std::is_same_v<T, std::string>) {
      to = std::get<std::string>(value);
    } else if constexpr (duration) {
      to = std::get<util::Millis>(value);
    } else {
      to = static_cast<T>(std::get<long long>(value));
    }
  };
  f.initial = [] {
    const S defaults{};
    const T& v = defaults.*M;
    if constexpr (std::is_same_v<T, bool>) {
      return std::string(v ? "yes" : "");
    } else if constexpr (std::is_same_v<T, std::string>) {
      return v;
    } else if constexpr (std::is_same_v<T, util::Millis>) {
      return v.count() == 0 ? std::string() : util::format_duration(v);
    } else if constexpr (duration) {
      return v ? util::format_duration(*v) : std::string();
    } else {
      return v == 0 ? std::string() : std::to_string(v);
    }
  };
  return f;
}

// One row of the option table. An option whose help or meaning differs between commands
// (--signal, --token-file, --json...) has a row per meaning: its names are unique per command.
// A row without a field is read by name in cli/convert.cpp, for what one field cannot say (a
// list of URLs, -n's wait of 0, a signal's name...).
struct OptionSpec {
  const char* names;  // CLI11's form: "-t,--ttl" (short, long, aliases)
  Commands commands;
  Kind kind;
  const char* type;           // the value's name (D, N, F, URL...); "" for a flag
  const char* config;         // a setting: its config file key (its long name); "" for the command line only
  const char* env;            // the variable that gives it; "" for none
  const char* help;           // --help's text, where "{}" stands for the default
  const char* fallback;       // the default in words, for a default that is no value of the field
                              // (or no field): "forever"; "" for the field's initializer
  Field to{};                 // the field it fills
  Check check{};              // the limits of its value
  const char* env_also = "";  // a variable read when env is unset: REDIS_URL after RLOCK_URL
  const char* excludes = "";  // an option of the same command that this one excludes ("--wait")
  bool repeated = false;      // given several times, each value counts (-u): a list
  bool hidden = false;        // accepted but not shown in --help, the dump or the completions
  Builtin builtin = Builtin::none;
};

}  // namespace rlock::commands
