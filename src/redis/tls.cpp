#include "tls.hpp"

#include "error.hpp"
#include "exit_code.hpp"

#include "redis/openssl.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstring>

namespace rlock::redis {

namespace {

std::string openssl_reason() {
  unsigned long code = openssl().ERR_get_error();
  std::string reason;
  while (code != 0) {
    char text[256];
    openssl().ERR_error_string_n(code, text, sizeof text);
    // "error:0A000086:SSL routines::certificate verify failed": keep what follows the last ':'.
    std::string_view view(text);
    size_t colon = view.rfind(':');
    reason = std::string(colon == std::string_view::npos ? view : view.substr(colon + 1));
    code = openssl().ERR_get_error();
  }
  return reason.empty() ? std::string("TLS error") : reason;
}

void check_readable(const std::string& path, const char* option) {
  if (::access(path.c_str(), R_OK) != 0) {
    throw Error(exit_code::k_config, fmt::format("cannot read {} {}: {}", option, path, std::strerror(errno)));
  }
}

// One context per process: every rediss:// connection shares the same trust and identity.
SSL_CTX* context(const TlsOptions& options) {
  static SSL_CTX* cached = nullptr;
  if (cached) return cached;
  // Kept only once fully set up: a failure below must not leave a half-configured context.
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> owner(openssl().SSL_CTX_new(openssl().TLS_client_method()),
                                                     openssl().SSL_CTX_free);
  SSL_CTX* ctx = owner.get();
  if (!ctx) throw Error(exit_code::k_internal, "cannot create a TLS context: " + openssl_reason());
  openssl().SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr);
  if (!options.insecure) {
    openssl().SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (!options.cacert.empty()) {
      check_readable(options.cacert, "--cacert");
      if (openssl().SSL_CTX_load_verify_locations(ctx, options.cacert.c_str(), nullptr) != 1) {
        throw Error(exit_code::k_config, fmt::format("--cacert {}: {}", options.cacert, openssl_reason()));
      }
    } else {
      openssl().SSL_CTX_set_default_verify_paths(ctx);
    }
  }
  if (!options.cert.empty() || !options.key.empty()) {
    if (options.cert.empty() || options.key.empty()) {
      throw Error(exit_code::k_config, "a client certificate needs both --cert and --key");
    }
    check_readable(options.cert, "--cert");
    check_readable(options.key, "--key");
    if (openssl().SSL_CTX_use_certificate_chain_file(ctx, options.cert.c_str()) != 1) {
      throw Error(exit_code::k_config, fmt::format("--cert {}: {}", options.cert, openssl_reason()));
    }
    if (openssl().SSL_CTX_use_PrivateKey_file(ctx, options.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        openssl().SSL_CTX_check_private_key(ctx) != 1) {
      throw Error(exit_code::k_config, fmt::format("--key {}: {}", options.key, openssl_reason()));
    }
  }
  cached = owner.release();
  return cached;
}

bool is_ip_address(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 || inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

[[noreturn]] void session_failed(const std::string& display) {
  std::string reason = openssl_reason();
  // TLS 1.3 reports a refused client certificate only after the handshake, often without text.
  if (reason == "TLS error" || reason.find("alert") != std::string::npos) {
    reason += " (the server ended the session: does it require a client certificate? --cert/--key)";
  }
  throw Error(exit_code::k_unavailable, fmt::format("{}: TLS error: {}", display, reason));
}

}  // namespace

void prepare_tls(const TlsOptions& options) { context(options); }

TlsSession::TlsSession(int fd, const std::string& host, const TlsOptions& options, const std::string& display)
    : m_display(display) {
  SSL_CTX* ctx = context(options);
  std::unique_ptr<SSL, decltype(&::SSL_free)> ssl(openssl().SSL_new(ctx), openssl().SSL_free);
  if (!ssl) throw Error(exit_code::k_internal, "cannot create a TLS session: " + openssl_reason());
  openssl().SSL_set_fd(ssl.get(), fd);
  if (!is_ip_address(host)) {
    // SSL_set_tlsext_host_name is a macro with a C cast; this is what it expands to.
    openssl().SSL_ctrl(ssl.get(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                       const_cast<char*>(host.c_str()));
  }
  if (!options.insecure) {
    X509_VERIFY_PARAM* param = openssl().SSL_get0_param(ssl.get());
    openssl().X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    int ok = is_ip_address(host) ? openssl().X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                                 : openssl().X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
    if (ok != 1) throw Error(exit_code::k_config, fmt::format("{}: cannot verify host name {}", display, host));
  }
  m_ssl = ssl.release();
}

bool TlsSession::handshake(short* want) {
  openssl().ERR_clear_error();
  int r = openssl().SSL_connect(m_ssl);
  if (r == 1) return true;
  int err = openssl().SSL_get_error(m_ssl, r);
  if (err == SSL_ERROR_WANT_READ) {
    *want = POLLIN;
    return false;
  }
  if (err == SSL_ERROR_WANT_WRITE) {
    *want = POLLOUT;
    return false;
  }
  long verify = openssl().SSL_get_verify_result(m_ssl);
  std::string reason;
  if (verify != X509_V_OK) {
    reason = fmt::format("certificate verify failed: {}", openssl().X509_verify_cert_error_string(verify));
  } else if (err == SSL_ERROR_SYSCALL && openssl().ERR_peek_error() == 0) {
    reason =
        "the server closed the connection during the TLS handshake (not a TLS port, or it wants a client "
        "certificate: --cert/--key)";
  } else {
    reason = openssl_reason();
    if (reason.find("wrong version number") != std::string::npos) reason += " (is this port plain-text Redis?)";
  }
  throw Error(exit_code::k_unavailable, fmt::format("{}: TLS handshake failed: {}", m_display, reason));
}

TlsSession::~TlsSession() {
  if (m_ssl) openssl().SSL_free(m_ssl);
}

ssize_t TlsSession::read(char* buffer, size_t size, short* want) {
  openssl().ERR_clear_error();
  int n = openssl().SSL_read(m_ssl, buffer, static_cast<int>(size));
  if (n > 0) return n;
  int err = openssl().SSL_get_error(m_ssl, n);
  if (err == SSL_ERROR_WANT_READ)
    *want = POLLIN;
  else if (err == SSL_ERROR_WANT_WRITE)
    *want = POLLOUT;
  else if (err == SSL_ERROR_ZERO_RETURN)
    return 0;
  else if (err == SSL_ERROR_SYSCALL && openssl().ERR_peek_error() == 0)
    return 0;
  else
    session_failed(m_display);
  return -1;
}

ssize_t TlsSession::write(const char* data, size_t size, short* want) {
  openssl().ERR_clear_error();
  int n = openssl().SSL_write(m_ssl, data, static_cast<int>(size));
  if (n > 0) return n;
  int err = openssl().SSL_get_error(m_ssl, n);
  if (err == SSL_ERROR_WANT_READ)
    *want = POLLIN;
  else if (err == SSL_ERROR_WANT_WRITE)
    *want = POLLOUT;
  else
    session_failed(m_display);
  return -1;
}

}  // namespace rlock::redis
