#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

struct ssl_st;

namespace rlock::redis {

// TLS trust and client identity, common to every rediss:// connection of a process.
struct TlsOptions {
  std::string cacert;     // CA bundle; empty: the system's CAs
  std::string cert, key;  // client certificate and its key (PEM)
  bool insecure = false;  // skip certificate and host name verification
};

// Loads the CA bundle and client certificate now (throws rlock::Error 78 for bad files), so that
// they are checked before any connection.
void prepare_tls(const TlsOptions& options);

// One TLS session over a connected, non-blocking socket (OpenSSL).
class TlsSession {
public:
  // Waits until the socket is ready for `events` (POLLIN or POLLOUT); throws on timeout.
  using Wait = std::function<void(short events)>;

  // Performs the handshake, verifying the server's certificate and host name unless insecure.
  // Throws rlock::Error: 78 for unreadable or bad certificate files, 69 for failed handshakes,
  // naming the reason (certificate verify failed: ..., wrong version number, ...).
  TlsSession(int fd, const std::string& host, const TlsOptions& options, const std::string& display, const Wait& wait);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Like recv/send on a non-blocking socket: bytes moved; 0 when the peer closed (read);
  // -1 when the call must wait, with *want set to POLLIN or POLLOUT. Throws on errors.
  ssize_t read(char* buffer, size_t size, short* want);
  ssize_t write(const char* data, size_t size, short* want);

private:
  ssl_st* m_ssl = nullptr;
  std::string m_display;
};

}  // namespace rlock::redis
