#include "resolver.hpp"

#include "error.hpp"
#include "exit_code.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cstring>
#include <mutex>

namespace rlock::redis {

namespace {

// What a lookup hands to glibc. glibc's thread may still use it after the Lookup is gone (a
// lookup that cannot be cancelled), so it is never freed: a few hundred bytes for each host name
// a process looks up, kept reachable here (for leak checkers too).
struct Request {
  gaicb cb{};
  addrinfo hints{};
  std::string host, port;
  int event = -1;  // a dup of the Lookup's eventfd: notify writes to it once, then closes it
};

std::mutex g_requests_mutex;
std::vector<std::unique_ptr<Request>> g_requests;

void notify(sigval value) {
  auto* request = static_cast<Request*>(value.sival_ptr);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(request->event, &one, sizeof one);
  ::close(request->event);
}

std::vector<Address> copy(const addrinfo* list) {
  std::vector<Address> out;
  for (const addrinfo* ai = list; ai; ai = ai->ai_next) {
    const char* bytes = reinterpret_cast<const char*>(ai->ai_addr);
    out.push_back({std::vector<char>(bytes, bytes + ai->ai_addrlen), ai->ai_family});
  }
  return out;
}

}  // namespace

Lookup::Lookup(const std::string& host, int port) : m_host(host), m_port(std::to_string(port)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
  addrinfo* found = nullptr;
  // A numeric address needs no lookup: no thread, no waiting.
  if (::getaddrinfo(host.c_str(), m_port.c_str(), &hints, &found) == 0) {
    m_addresses = copy(found);
    ::freeaddrinfo(found);
    m_done = true;
    return;
  }
  m_event.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  auto request = std::make_unique<Request>();
  request->host = host;
  request->port = m_port;
  request->hints.ai_family = AF_UNSPEC;
  request->hints.ai_socktype = SOCK_STREAM;
  request->hints.ai_flags = AI_NUMERICSERV;
  request->cb.ar_name = request->host.c_str();
  request->cb.ar_service = request->port.c_str();
  request->cb.ar_request = &request->hints;
  request->event = m_event.valid() ? ::dup(m_event.get()) : -1;
  if (request->event < 0) {
    m_done = true;
    m_error = EAI_SYSTEM;
    return;
  }
  sigevent done{};
  done.sigev_notify = SIGEV_THREAD;
  done.sigev_notify_function = notify;
  done.sigev_value.sival_ptr = request.get();
  gaicb* list[] = {&request->cb};
  if (int rc = ::getaddrinfo_a(GAI_NOWAIT, list, 1, &done); rc != 0) {
    ::close(request->event);
    m_done = true;
    m_error = rc;
    return;
  }
  m_request = &request->cb;
  m_notify_fd = request->event;
  std::lock_guard<std::mutex> lock(g_requests_mutex);
  g_requests.push_back(std::move(request));
}

Lookup::~Lookup() {
  if (!m_request) return;
  // Cancelled before it started: notify never runs, so its copy of the event is ours to close.
  if (!m_done && ::gai_cancel(m_request) == EAI_CANCELED) ::close(m_notify_fd);
}

bool Lookup::done() {
  if (m_done) return true;
  int rc = ::gai_error(m_request);
  if (rc == EAI_INPROGRESS) return false;
  m_done = true;
  m_error = rc;
  if (rc == 0) {
    m_addresses = copy(m_request->ar_result);
    ::freeaddrinfo(m_request->ar_result);
    m_request->ar_result = nullptr;
  }
  return true;
}

std::vector<Address> Lookup::addresses() {
  if (!done())
    throw Error(exit_code::k_unavailable, fmt::format("cannot resolve '{}': the lookup is not done", m_host));
  if (m_error != 0) {
    std::string why = m_error == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(m_error);
    throw Error(exit_code::k_unavailable, fmt::format("cannot resolve '{}': {}", m_host, why));
  }
  if (m_addresses.empty())
    throw Error(exit_code::k_unavailable, fmt::format("cannot resolve '{}': no address", m_host));
  return m_addresses;
}

}  // namespace rlock::redis
