#pragma once

#include <sys/types.h>

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
  // Sets up a session over fd that verifies the server's certificate and host name unless
  // insecure. Throws rlock::Error 78 for unreadable or bad certificate files.
  TlsSession(int fd, const std::string& host, const TlsOptions& options, const std::string& display);

  // Moves the handshake on without blocking: true once it is done, else false with *want set to
  // POLLIN or POLLOUT. Throws rlock::Error 69 for a failed handshake, naming the reason
  // (certificate verify failed: ..., wrong version number, ...).
  bool handshake(short* want);
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
