#pragma once
// The keeper's rooms, shared by its three files (not for use outside commands/keeper*):
//   keeper_state.cpp   the state directory and the state files (read by release and extend);
//   keeper.cpp         the keeper itself: the renewal loop of one hold;
//   keeper_daemon.cpp  starting it: the fork, the detach, the handshake.
#include "commands/keeper.hpp"

#include <optional>
#include <string>
#include <vector>

namespace rlock::commands::keeper::detail {

// The state directories to look in, the preferred one first.
std::vector<std::string> candidate_dirs();
// Whether dir is a directory of ours that nobody else may use; why not, in *why.
bool safe_dir(const std::string& dir, std::string* why);
std::string state_file(const std::string& dir, const std::string& id);
bool valid_id(const std::string& id);
std::string format_state(const State& s);
std::optional<State> parse_state(const std::string& text);
// Where the state of id is, among the directories, if anywhere.
std::optional<std::string> find_state(const std::string& id);
std::optional<State> read_path(const std::string& path);
bool keeper_alive(const State& s);

// The keeper's life, in the detached process: renews once, says so on `armed`, then keeps the
// lock until the watched process ends (or the lock is lost). Returns the keeper's exit code.
int keep(const Spec& spec, proc::Watched& watched, const std::string& state_path, int armed);

}  // namespace rlock::commands::keeper::detail
