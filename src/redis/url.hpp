#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rlock::redis {

// Where one Redis server listens and how to log in to it.
struct Endpoint {
  enum class Kind { tcp, unix_socket };

  Kind kind = Kind::tcp;
  std::string host = "127.0.0.1";  // tcp: name or address, without IPv6 brackets
  int port = 6379;                 // tcp
  std::string path;                // unix_socket
  std::string user;                // ACL user; empty means "default"
  std::string password;            // empty means no AUTH
  int db = 0;
  bool tls = false;              // rediss://
  bool password_in_url = false;  // the password was written in the URL itself
  // Where a password not in the URL came from ("RLOCK_PASSWORD", "--password-file F"), for the
  // message of a failed AUTH.
  std::string password_from;

  // The URL without its password (":***" where the URL had one), for messages and logs.
  std::string display() const;
  // A stable name of the server and database, naming its connection.
  std::string identity() const;
};

// What a URL names: one server, or a master found through Sentinel.
struct Url {
  enum class Kind { direct, sentinel };

  Kind kind = Kind::direct;
  Endpoint endpoint;                // direct: the server; sentinel: user, password, db and TLS of the master
  std::vector<Endpoint> sentinels;  // sentinel: asked for the master's address
  std::string master;               // sentinel: the master's name
  std::string sentinel_user;        // sentinel: ACL user and password for the sentinels themselves
  std::string sentinel_password;

  // The URL without its password, for messages and logs.
  std::string display() const;
};

// Parses redis://[user[:pass]@]host[:port][/db], rediss://... (TLS), unix:///path[?db=N] and
// redis+sentinel://[user[:pass]@]host[:port][,host[:port]...]/MASTER[/db].
// Throws rlock::Error with exit code 78 naming the problem (never echoing a password).
Url parse_url(std::string_view url);

}  // namespace rlock::redis
