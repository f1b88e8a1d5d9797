#pragma once

#include "error.hpp"
#include "exit_code.hpp"
#include "redis/reply.hpp"
#include "redis/resolver.hpp"
#include "redis/tls.hpp"
#include "redis/url.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/fd.hpp"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct redisReader;

namespace rlock::redis {

using Clock = util::BootClock;
using Command = std::vector<std::string>;
class Connection;
// The commands to send after a request whose answer was lost (see Connection::pipeline), made
// only when they are sent, for the connection that sends them.
using UndoCommands = std::function<std::vector<Command>(const Connection&)>;

struct Timeouts {
  util::Millis connect{1000};  // name lookup, TCP or unix connect and TLS handshake together
  util::Millis command{2000};  // from sending a command (or pipeline) to its last reply
};

// A Lua script run by FCALL of its function in rlock's function library (Redis 7+), or by
// EVALSHA, falling back to EVAL when the server does not have it cached.
struct Script {
  std::string_view name;
  std::string_view source;
  std::string_view sha1;      // computed at build time
  std::string_view function;  // its name in `library` ("": run by EVALSHA only)
  std::string_view library;   // the function library's source, for FUNCTION LOAD
};

// The command that runs script with keys and args: EVALSHA, or with `source` EVAL (the fallback
// after NOSCRIPT).
Command eval_command(const Script& script, const std::vector<std::string>& keys, const std::vector<std::string>& args,
                     bool source);

// The ways to run a script, in the order they are tried: FCALL; FUNCTION LOAD REPLACE of the
// library and FCALL in one exchange (the server does not have the library: new, restarted,
// flushed, failed over); EVALSHA (Redis 6, or a server or an ACL that refuses FUNCTION); EVAL
// (the script is not cached).
enum class ScriptWay { fcall, load, evalsha, eval };

// The first way for script: FCALL when `functions` and the script has a function, else EVALSHA.
ScriptWay first_way(const Script& script, bool functions);
// What a connection that ran script the way `way` has the server keep (Connection::ran): the
// function library (FCALL, load), or the script's own source (EVAL, EVALSHA: each one cached apart).
inline const void* code_of(const Script& script, ScriptWay way) {
  return way == ScriptWay::fcall || way == ScriptWay::load ? script.library.data() : script.source.data();
}
// The commands of one way: one, or two for `load` (the library, then the FCALL).
std::vector<Command> script_commands(const Script& script, ScriptWay way, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& args);
// After the replies of a way: the way to try next, or nullopt when the last reply is the
// script's answer.
std::optional<ScriptWay> next_way(ScriptWay way, const std::vector<Reply>& replies);

// One call of a script, for an undo (see Client::eval).
struct ScriptCall {
  const Script* script;
  std::vector<std::string> keys;
  std::vector<std::string> args;
};
// The scripts to run after a script whose answer was lost, made only when they are sent.
using Undo = std::function<std::vector<ScriptCall>()>;
// The commands of an undo sent on `on` right behind a script run the way `way`: the same way, so
// that it costs the server no more than any call: FCALL (the library is there, as the request
// ahead of it loaded it or found it), or EVALSHA of a script that `on` ran already. A script it
// never ran may not be cached (EVALSHA keeps each script apart: the acquire's being there says
// nothing of the release's), and an EVALSHA that found nothing would leave the hold behind: it
// goes by EVAL of its source.
std::vector<Command> undo_commands(const std::vector<ScriptCall>& calls, ScriptWay way, const Connection& on);
// Whether rlock runs its scripts as functions where the server has them: unless the
// environment's RLOCK_FUNCTIONS is 0 (read once).
bool functions_wanted();

// One connection to one Redis server over rlock's own socket (TCP or unix, optionally TLS), with
// hiredis as the RESP codec. Connects lazily (AUTH and SELECT go out in the same write as the
// first commands) and bounds every step by the timeouts and by an optional cap.
//
// It is a state machine that never blocks by itself: start() an exchange, then poll pending()
// and call advance() until finished(). The blocking calls (pipeline, call) drive it from a poll
// of their own; exchange_all (below) drives several at once from one poll.
//
// Transport failures are rlock::Error (69 unavailable, 77 refused) and close the socket, so the
// next exchange reconnects; error replies of the server come back as Reply values.
class Connection {
public:
  Connection(Endpoint endpoint, Timeouts timeouts, TlsOptions tls = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // A command sent with AUTH and SELECT on every new connection (no round trip of its own), whose
  // reply greeting_reply() keeps; an error reply (an ACL that forbids it) is kept too, never thrown.
  void set_greeting(Command command) { m_greeting = std::move(command); }
  const std::optional<Reply>& greeting_reply() const { return m_greeting_reply; }

  // While a blocking call waits, also watch fd and call on_ready when it is readable (run
  // forwards signals this way, without network I/O in a handler). When on_ready returns true,
  // the exchange is abandoned at once (a Ctrl-C during a long BLPOP): the call throws.
  void set_interrupt(int fd, std::function<bool()> on_ready);

  // Sends the commands in one write and returns their replies, in order. When the exchange fails
  // after its request went out (a timeout: the server may still run it later), `undo` is written
  // on the same socket before it is closed, best effort, so that the server runs it right after
  // the request if it ever runs that.
  // `budget`: more than the command timeout that the server may take (a blocking command).
  std::vector<Reply> pipeline(const std::vector<Command>& commands, const UndoCommands& undo = {},
                              util::Millis budget = {});
  // Sends one command and returns its reply.
  Reply call(const Command& argv);
  // Like call, allowing the server `budget` more than the command timeout (a blocking command).
  Reply call_blocking(const Command& argv, util::Millis budget);

  // The asynchronous form of pipeline: starts the exchange (connecting first when needed). An
  // `undo` must stay alive until the exchange ends (pipeline's does).
  void start(const std::vector<Command>& commands, util::Millis budget = {}, const UndoCommands& undo = {});
  // What to poll while the exchange is under way (fd -1 once it is finished) and until when.
  pollfd pending() const;
  Clock::time_point deadline() const { return m_deadline; }
  // Moves the exchange on after a poll: as far as it goes without blocking, or to its failure
  // when the deadline has passed.
  void advance();
  bool finished() const { return m_state == State::idle || m_state == State::failed; }
  // Whether the exchange under way may be left unanswered (its socket closed) with its request
  // still run: the request is one command (no greeting, no second command, whose answers could
  // come while the rest is unsent) and has left in full, and the socket is a plain one, where
  // nothing but this answer can be unread, so that the close is a FIN behind the request (or a
  // reset once it has been answered). A TLS session may hold records the server sent unasked
  // (session tickets): the close would be a reset, which may discard the request unread.
  bool request_sent() const { return m_state == State::receiving && !m_tls && m_expected == 1; }
  // The scripts and function libraries (by the address of their source) that this socket has run:
  // a request that runs one again cannot be answered "run it another way" (NOSCRIPT, no such
  // function), unless the server lost them meanwhile (SCRIPT FLUSH, FUNCTION FLUSH). A new socket
  // (a reconnection: the server may have restarted) has run none.
  void ran(const void* code) {
    if (!has_run(code)) m_ran.push_back(code);
  }
  bool has_run(const void* code) const { return std::find(m_ran.begin(), m_ran.end(), code) != m_ran.end(); }
  // An exchange left under way (its answers read later): its deadline counts again from now, as
  // if it had just been sent, so that an answer that came meanwhile is read, not timed out.
  void renew_deadline() {
    if (!finished()) m_deadline = capped(Clock::now() + m_timeouts.command + m_budget);
  }
  // The replies of the finished exchange; throws its failure.
  std::vector<Reply> result();

  // No wait (lookup, connect, send, reply) goes past this instant, whatever the timeouts say;
  // nullopt lifts it. run caps its renewals at the moment it must start stopping the child.
  void cap_waits(std::optional<Clock::time_point> cap) { m_cap = cap; }

  // Closes the socket; the next exchange reconnects. An exchange under way ends as failed.
  void close();
  // Gives up the exchange under way (its answer no longer matters): closes the socket.
  void abandon();
  bool connected() const { return m_socket.valid() && m_state != State::connecting && m_state != State::handshaking; }
  const Endpoint& endpoint() const { return m_endpoint; }
  const Timeouts& timeouts() const { return m_timeouts; }

  // The most a reply may take; a server that streams more is cut off.
  static constexpr size_t k_max_reply_bytes = 64 << 20;

private:
  enum class State { idle, resolving, connecting, handshaking, sending, receiving, failed };

  // Whether the server has closed (or reset) the idle connection: checked before it is reused.
  bool peer_hung_up() const;
  void begin_connect();
  void try_address();
  void connected_socket();
  void ready_to_send();
  void step_resolving();
  void step_connecting();
  void step_handshaking();
  void step_sending();
  void step_receiving();
  void check_hello(const Reply& reply, size_t index);
  void check_reply(const Reply& reply);
  [[noreturn]] void fail(int code, const std::string& why);
  [[noreturn]] void fail(const std::string& why) { fail(exit_code::k_unavailable, why); }
  void send_undo();
  Clock::time_point capped(Clock::time_point deadline) const { return m_cap && *m_cap < deadline ? *m_cap : deadline; }
  std::string timeout_message() const;

  Endpoint m_endpoint;
  Timeouts m_timeouts;
  TlsOptions m_tls_options;
  util::Fd m_socket;
  std::unique_ptr<TlsSession> m_tls;  // set on rediss:// connections
  std::unique_ptr<redisReader, void (*)(redisReader*)> m_reader;
  std::optional<Clock::time_point> m_cap;
  Command m_greeting;
  std::optional<Reply> m_greeting_reply;
  int m_interrupt_fd = -1;
  std::function<bool()> m_on_interrupt;

  // Resolved once: a reconnect during run must not look the name up again.
  std::unique_ptr<Lookup> m_lookup;
  std::vector<Address> m_addresses;
  size_t m_next_address = 0;
  std::string m_connect_error;

  // The exchange under way.
  State m_state = State::idle;
  short m_want = 0;              // events to poll for
  Clock::time_point m_deadline;  // of the current phase (connecting, then the exchange)
  util::Millis m_budget{0};
  std::string m_wire;  // bytes still to send
  // Sent best effort if the exchange fails after its request left; the caller's (pipeline's
  // argument), alive until the exchange ends.
  const UndoCommands* m_undo = nullptr;
  bool m_request_sent = false;
  std::vector<std::string> m_hello_names;  // AUTH/SELECT sent first: their replies come first
  size_t m_expected = 0;                   // replies to read in all, hello included
  size_t m_received = 0;
  size_t m_reply_bytes = 0;
  std::vector<Reply> m_replies;
  std::vector<const void*> m_ran;  // see ran()
  std::optional<Error> m_error;
};

// Runs one pipeline on each of several connections at once, from one poll: each connection is
// bounded by its own timeouts and cap, so a dead or paused server costs at most its own timeout.
// Returns for each connection its replies or its failure.
struct Outcome {
  std::vector<Reply> replies;
  std::optional<Error> error;  // set when the exchange failed (the replies are then empty)
};
// While waiting, interrupt_fd (when >= 0) is watched as by Connection::set_interrupt. With
// `enough`, asked after each answer with the outcomes so far (nullopt: not finished yet), the
// exchange ends as soon as it says true: the connections still waiting are closed (their answer
// would come out of step) and report an error.
using Enough = std::function<bool(const std::vector<std::optional<Outcome>>&)>;
std::vector<Outcome> exchange_all(const std::vector<Connection*>& connections,
                                  const std::vector<std::vector<Command>>& commands, int interrupt_fd = -1,
                                  const std::function<bool()>& on_interrupt = {}, const Enough& enough = {});
// Drives exchanges already started (Connection::start) to their end from one poll, as
// exchange_all does once it has started its own: for requests whose answers are read later.
std::vector<Outcome> finish_all(const std::vector<Connection*>& connections, int interrupt_fd = -1,
                                const std::function<bool()>& on_interrupt = {}, const Enough& enough = {});

}  // namespace rlock::redis
