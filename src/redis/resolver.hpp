#pragma once

#include "util/fd.hpp"

#include <memory>
#include <string>
#include <vector>

struct gaicb;

namespace rlock::redis {

// One address of a host, as connect(2) takes it.
struct Address {
  std::vector<char> bytes;  // a sockaddr
  int family = 0;
};

// A host name lookup that a poll loop can wait for, so that --connect-timeout bounds it like any
// other wait (glibc's getaddrinfo blocks for as long as the resolver retries: 5s and more).
// Numeric addresses are done at once, without a lookup.
class Lookup {
public:
  Lookup(const std::string& host, int port);
  ~Lookup();
  Lookup(const Lookup&) = delete;
  Lookup& operator=(const Lookup&) = delete;

  // Readable when the lookup has ended; -1 when it ended already.
  int fd() const { return m_done ? -1 : m_event.get(); }
  // Whether it has ended (by now).
  bool done();
  // The addresses found. Throws rlock::Error 69 saying why there are none.
  std::vector<Address> addresses();

private:
  std::string m_host, m_port;
  bool m_done = false;
  int m_error = 0;
  std::vector<Address> m_addresses;
  util::Fd m_event;            // an eventfd the lookup's thread writes when it ends
  gaicb* m_request = nullptr;  // owned by the process (see resolver.cpp)
  int m_notify_fd = -1;        // the event's copy that glibc's notification closes
};

}  // namespace rlock::redis
