#include "cli/settings.hpp"

#include "cli/config_file.hpp"
#include "cli/options.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "util/file.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <system_error>

#include <unistd.h>

namespace rlock::cli {

namespace {

// The config file read, for messages.
std::string g_config_path;

bool parse_bool(const Setting& s, const std::string& text) {
  std::string v = text;
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  bad_setting(s, fmt::format("'{}' is not true or false", util::printable(text)));
}

void assign(Setting& s, const std::string& value, Source source) {
  s.source = source;
  if (s.spec->kind == commands::Kind::flag) {
    s.flag = parse_bool(s, value);
  } else {
    s.text = value;
  }
}

}  // namespace

void usage(const std::string& message) { throw Error(exit_code::k_usage, message); }

Setting* find_setting(Parsed& p, const std::string& name) {
  for (Setting& s : p.settings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

Setting& get(Parsed& p, const std::string& name) {
  if (Setting* s = find_setting(p, name)) return *s;
  throw Error(exit_code::k_internal, fmt::format("no option --{}", name));
}

bool given(Parsed& p, const std::string& name) {
  const Setting* s = find_setting(p, name);
  return s && s->source != Source::unset;
}

std::string origin(const Setting& s) {
  switch (s.source) {
    case Source::env: return s.variable;
    case Source::config: return fmt::format("{} (config file {})", s.name, util::printable(g_config_path));
    default: return "--" + s.name;
  }
}

void bad_setting(const Setting& s, const std::string& why) {
  throw Error(s.source == Source::config ? exit_code::k_config : exit_code::k_usage,
              fmt::format("{}: {}", origin(s), why));
}

std::pair<std::string, bool> config_path(Parsed& p) {
  if (const Setting* config = find_setting(p, "config"); config && !config->text.empty()) return {config->text, true};
  if (const char* env = std::getenv("RLOCK_CONFIG"); env && *env) return {env, true};
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  std::string user_path;
  if (xdg && *xdg)
    user_path = std::string(xdg) + "/rlock/config.toml";
  else if (home && *home)
    user_path = std::string(home) + "/.config/rlock/config.toml";
  if (!user_path.empty() && ::access(user_path.c_str(), F_OK) == 0) return {user_path, false};
  return {"/etc/rlock/config.toml", false};
}

void layer_settings(Parsed& p, const std::string& config_path, bool config_required) {
  for (Setting& s : p.settings) {
    if (s.source != Source::unset || !*s.spec->config) continue;
    // The table's variable, then another one: REDIS_URL, which many Redis clients read, after RLOCK_URL.
    for (const char* variable : {s.spec->env, s.spec->env_also}) {
      if (!*variable) continue;
      const char* value = std::getenv(variable);
      // An empty variable counts as unset, but for RLOCK_TOKEN_ENV: an empty name is refused.
      if (!value || (!*value && s.name != "token-env")) continue;
      s.variable = variable;
      assign(s, value, Source::env);
      break;
    }
  }
  if (config_path.empty()) return;
  g_config_path = config_path;
  const std::string shown = util::printable(config_path);
  std::string text;
  try {
    std::optional<std::string> read = util::read_small_file_if_any(config_path, 1 << 20);
    if (!read) {
      if (!config_required) return;
      throw std::system_error(ENOENT, std::generic_category(), config_path);
    }
    text = std::move(*read);
  } catch (const std::system_error& e) {
    if (!config_required && e.code() == std::errc::no_such_file_or_directory) return;
    throw Error(exit_code::k_config, fmt::format("cannot read config file {}: {}", shown, e.code().message()));
  } catch (const std::length_error&) {
    throw Error(exit_code::k_config, fmt::format("config file {} is too large", shown));
  }
  for (const auto& [name, value] : parse_config(text, config_path)) {
    if (name == "timeout") {
      throw Error(exit_code::k_config, fmt::format("{}: unknown setting 'timeout': use wait (how long to wait for "
                                                   "the lock) or io-timeout (each Redis command's timeout)",
                                                   shown));
    }
    if (!is_config_key(name)) {
      throw Error(exit_code::k_config, fmt::format("{}: unknown setting '{}'", shown, util::printable(name)));
    }
    Setting* s = find_setting(p, name);
    if (s && *s->spec->config && s->source == Source::unset) assign(*s, value, Source::config);
  }
}

}  // namespace rlock::cli
