#pragma once

#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace rlock::cli {

// Every option as text, as CLI11, the environment or the config file gave it; cli/convert.cpp
// turns it into each command's options.
struct Raw {
  std::vector<std::string> urls;
  std::string url, connect_timeout, io_timeout, prefix, config, node_timeout;
  std::string cacert, cert, tls_key, password_file;
  bool insecure = false;
  std::string wait_replicas, wait_timeout;
  bool quiet = false, verbose = false, syslog = false;
  std::string key;
  std::vector<std::string> keys;
  std::string pattern = "*";
  std::string ttl, wait, limit;
  bool no_wait = false, shared = false, exclusive = false;
  bool flock_close = false, flock_no_fork = false;  // flock's -o and -F, refused
  std::string conflict_exit_code;
  std::string command;
  bool command_given = false;  // -c, even empty
  std::vector<std::string> child;
  std::string signal, kill_after, lost_exit_code, max_hold, leftovers;
  bool strict = false;
  std::string sentinel_user, sentinel_password_file;
  std::string token_file, token_env;
  bool token_file_given = false;  // --token-file, even empty
  bool json = false, force = false;
  bool keepalive = false;
  std::string pid, keeper_log;
  std::string min_hold, log_length, lines;
  bool supersede = false, preempt = false, preemptible = false, follow = false;
};

// Where a setting's value came from, for error messages and exit codes.
enum class Source { unset, argv, env, config };

// A setting that the environment and the config file may give when argv does not: argv beats the
// environment (RLOCK_NAME), which beats the config file (name = value).
struct Setting {
  std::string name;                   // long option name, also the config file's key
  std::vector<CLI::Option*> options;  // global options are defined before and after the command name
  std::string* text;                  // one of these two
  bool* flag;
  Source source = Source::unset;
  std::string variable;       // Source::env: the variable that gave the value
  const char* env = "";       // the variable that gives it (from the option table)
  const char* env_also = "";  // read after env when env is unset: REDIS_URL after RLOCK_URL
};

struct Parsed {
  CLI::App* command = nullptr;  // the command named on the line
  std::string command_name;
  std::vector<Setting> settings;
};

// Throws the usage error (64).
[[noreturn]] void usage(const std::string& message);

Setting* find_setting(Parsed& p, const std::string& name);
// The setting a command surely registered.
Setting& get(Parsed& p, const std::string& name);
// The text that names a setting in an error: the option, the variable, or the config file.
std::string origin(const Setting& s);
// Throws 64 for a bad option or variable, 78 for a bad config file value.
[[noreturn]] void bad_setting(const Setting& s, const std::string& why);

// The config file to read: --config, RLOCK_CONFIG, then the default paths; true when it must exist.
std::pair<std::string, bool> config_path(const Raw& raw);

// Fills the settings argv left unset (those given on the command line are Source::argv already):
// the environment first, then the config file.
void layer_settings(Parsed& p, const std::string& config_path, bool config_required);

}  // namespace rlock::cli
