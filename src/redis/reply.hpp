#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlock::redis {

// One RESP reply, owned (converted from hiredis's reply tree).
struct Reply {
  enum class Type { nil, integer, string, status, error, array };

  Type type = Type::nil;
  int64_t integer = 0;
  std::string str;  // string, status and error text
  std::vector<Reply> elements;

  bool is_error() const { return type == Type::error; }
  bool is_nil() const { return type == Type::nil; }
  // The error's first word ("NOSCRIPT", "WRONGTYPE", "NOAUTH", ...), or "" when not an error.
  std::string error_code() const;
  // A script's field: the text of a string, status or integer ("" otherwise), and its number (0
  // when it is not one).
  std::string text() const;
  int64_t number() const;
};

}  // namespace rlock::redis
