#include "url.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

namespace rlock::redis {

namespace {

constexpr const char* k_forms =
    "redis://[USER[:PASSWORD]@]HOST[:PORT][/DB], rediss://... (TLS), unix:///PATH/redis.sock[?db=N] or "
    "redis+sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]";

// The URL as it may be shown: a password in it becomes ***, and control bytes are escaped.
std::string redacted(std::string_view url) {
  size_t start = url.find("://");
  start = start == std::string_view::npos ? 0 : start + 3;
  size_t end = url.find_first_of("/?#", start);
  std::string_view authority = url.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
  size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return util::printable(url);
  size_t colon = authority.substr(0, at).find(':');
  if (colon == std::string_view::npos) return util::printable(url);
  std::string out(url.substr(0, start + colon + 1));
  out += "***";
  out += url.substr(start + at);
  return util::printable(out);
}

[[noreturn]] void bad_url(std::string_view url, std::string_view why) {
  throw Error(exit_code::k_config, fmt::format("bad Redis URL '{}': {}", redacted(url), why));
}

int parse_db(std::string_view url, std::string_view text) {
  long long db = 0;
  if (!util::parse_int(text, 0, 1'000'000, db)) bad_url(url, fmt::format("database '{}' is not a number", text));
  return static_cast<int>(db);
}

void parse_userinfo(std::string_view url, std::string_view userinfo, Endpoint& ep) {
  size_t colon = userinfo.find(':');
  std::string_view user = userinfo.substr(0, colon);
  if (!util::percent_decode(user, ep.user)) bad_url(url, "bad %-escape in the user name");
  if (colon != std::string_view::npos) {
    if (!util::percent_decode(userinfo.substr(colon + 1), ep.password)) bad_url(url, "bad %-escape in the password");
    ep.password_in_url = !ep.password.empty();
  }
}

Endpoint parse_tcp(std::string_view url, std::string_view rest) {
  Endpoint ep;
  size_t slash = rest.find('/');
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    bad_url(url, fmt::format("query parameter '{}' is not supported: a redis:// URL takes none (the database is "
                             "the path: redis://HOST:PORT/DB)",
                             util::printable(rest.substr(q + 1))));
  }
  if (rest.find('#') != std::string_view::npos) bad_url(url, "a '#' fragment has no meaning in a Redis URL");
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    parse_userinfo(url, authority.substr(0, at), ep);
    authority = authority.substr(at + 1);
  }
  std::string_view port_text;
  bool bracketed = !authority.empty() && authority.front() == '[';
  if (bracketed) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) bad_url(url, "unclosed '[' in an IPv6 address");
    ep.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad_url(url, "expected ':port' after the IPv6 address");
      port_text = after.substr(1);
      if (port_text.empty()) bad_url(url, "empty port");
    }
  } else {
    size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) bad_url(url, "empty port");
      authority = authority.substr(0, colon);
    }
    ep.host = std::string(authority);
  }
  if (ep.host.empty()) bad_url(url, "no host");
  // Only a bracketed host may hold ':' (IPv6): "127.0.0.1::6379" is a typo, not an address.
  bool ipv6 = bracketed;
  for (char c : ep.host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
              c == '_' || (ipv6 && (c == ':' || c == '%'));
    if (!ok) bad_url(url, "bad character in the host name");
  }
  if (ep.host.size() > 253) bad_url(url, "host name too long");
  if (!port_text.empty()) {
    long long port = 0;
    if (!util::parse_int(port_text, 1, 65535, port))
      bad_url(url, fmt::format("port '{}' is not in 1-65535", port_text));
    ep.port = static_cast<int>(port);
  }
  if (!path.empty()) ep.db = parse_db(url, path);
  return ep;
}

Endpoint parse_unix(std::string_view url, std::string_view rest) {
  Endpoint ep;
  ep.kind = Endpoint::Kind::unix_socket;
  size_t at = rest.find('@');
  if (at != std::string_view::npos && rest.find('/') > at) {
    parse_userinfo(url, rest.substr(0, at), ep);
    rest = rest.substr(at + 1);
  }
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.empty() || rest.front() != '/')
    bad_url(url, "a unix socket URL needs an absolute path: unix:///path/redis.sock");
  if (!util::percent_decode(rest, ep.path)) bad_url(url, "bad %-escape in the socket path");
  for (const std::string& param : util::split(query, "&")) {
    size_t eq = param.find('=');
    std::string_view name = std::string_view(param).substr(0, eq);
    std::string_view value = eq == std::string::npos ? std::string_view() : std::string_view(param).substr(eq + 1);
    if (name == "db") {
      ep.db = parse_db(url, value);
    } else {
      bad_url(url, fmt::format("unknown parameter '{}' (only db=N)", name));
    }
  }
  return ep;
}

}  // namespace

std::string Endpoint::display() const {
  std::string auth;
  // (A password from elsewhere is not shown as if it were in the URL.)
  const bool shown = password_in_url && !password.empty();
  if (!user.empty())
    auth = fmt::format("{}{}", util::percent_encode(user), shown ? ":***@" : "@");
  else if (shown)
    auth = ":***@";
  if (kind == Kind::unix_socket) {
    return fmt::format("unix://{}{}{}", auth, path, db ? fmt::format("?db={}", db) : "");
  }
  bool v6 = host.find(':') != std::string::npos;
  return fmt::format("{}://{}{}{}{}:{}{}", tls ? "rediss" : "redis", auth, v6 ? "[" : "", host, v6 ? "]" : "", port,
                     db ? fmt::format("/{}", db) : "");
}

std::string Endpoint::identity() const {
  if (kind == Kind::unix_socket) return fmt::format("unix:{}/{}", path, db);
  return fmt::format("tcp:{}:{}/{}", host, port, db);
}

namespace {

Url parse_sentinel(std::string_view url, std::string_view rest) {
  Url out;
  out.kind = Url::Kind::sentinel;
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos)
    bad_url(url, "no master name: redis+sentinel://host:port[,host:port]/MASTER[/db]");
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = rest.substr(slash + 1);
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    parse_userinfo(url, authority.substr(0, at), out.endpoint);
    authority = authority.substr(at + 1);
  }
  for (const std::string& hostport : util::split(authority, ",")) {
    Endpoint s = parse_tcp(url, hostport);
    if (hostport.find(':') == std::string::npos ||
        (hostport.front() == '[' && hostport.find("]:") == std::string::npos)) {
      s.port = 26379;
    }
    out.sentinels.push_back(s);
  }
  if (out.sentinels.empty()) bad_url(url, "no sentinel host");
  if (authority.find(",,") != std::string_view::npos || authority.front() == ',' || authority.back() == ',') {
    bad_url(url, "empty sentinel address");
  }
  size_t next = path.find('/');
  std::string_view master = path.substr(0, next);
  if (master.empty()) bad_url(url, "no master name");
  if (master.find_first_of("?#@:") != std::string_view::npos) bad_url(url, "bad character in the master name");
  out.master = std::string(master);
  if (next != std::string_view::npos && next + 1 < path.size()) out.endpoint.db = parse_db(url, path.substr(next + 1));
  return out;
}

}  // namespace

std::string Url::display() const {
  if (kind == Kind::direct) return endpoint.display();
  std::string hosts;
  for (const Endpoint& s : sentinels) {
    if (!hosts.empty()) hosts += ',';
    hosts += fmt::format("{}:{}", s.host, s.port);
  }
  std::string auth;
  if (!endpoint.password.empty())
    auth = fmt::format("{}:***@", endpoint.user);
  else if (!endpoint.user.empty())
    auth = fmt::format("{}@", endpoint.user);
  return fmt::format("redis+sentinel://{}{}/{}{}", auth, hosts, master,
                     endpoint.db ? fmt::format("/{}", endpoint.db) : "");
}

Url parse_url(std::string_view url) {
  if (url.empty()) throw Error(exit_code::k_config, fmt::format("bad Redis URL: it is empty; use {}", k_forms));
  for (char c : url) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) bad_url(url, "it contains a control character");
  }
  if (url.size() > 4096) throw Error(exit_code::k_config, "bad Redis URL: longer than 4096 bytes");
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) bad_url(url, fmt::format("no scheme; use {}", k_forms));
  // Schemes are case-insensitive (RFC 3986): REDIS:// is redis://.
  std::string scheme(url.substr(0, sep));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = url.substr(sep + 3);
  if (scheme == "redis+sentinel") return parse_sentinel(url, rest);
  if (rest.find_first_of(", ") != std::string_view::npos) {
    bad_url(url,
            "a space or comma inside it (for a Redlock quorum of several masters, give -u once per URL, or "
            "separate them with spaces in RLOCK_URL)");
  }
  Url out;
  if (scheme == "redis" || scheme == "rediss") {
    out.endpoint = parse_tcp(url, rest);
    out.endpoint.tls = scheme == "rediss";
    return out;
  }
  if (scheme == "unix") {
    out.endpoint = parse_unix(url, rest);
    return out;
  }
  bad_url(url, fmt::format("unknown scheme '{}'; use {}", util::printable(url.substr(0, sep)), k_forms));
}

}  // namespace rlock::redis
