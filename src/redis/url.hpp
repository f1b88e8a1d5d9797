#pragma once

#include <string>
#include <string_view>

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
  bool password_in_url = false;  // the password was written in the URL itself

  // The URL without its password, for messages and logs.
  std::string display() const;
  // A stable name of the server and database, for recognising a hold across processes.
  std::string identity() const;
};

// Parses redis://[user[:pass]@]host[:port][/db] and unix:///path[?db=N].
// Throws rlock::Error with exit code 78 naming the problem; rediss:// and
// redis+sentinel:// are refused as not supported yet.
Endpoint parse_url(std::string_view url);

}  // namespace rlock::redis
