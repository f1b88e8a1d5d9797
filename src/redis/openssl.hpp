#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace rlock::redis {

// The OpenSSL functions rlock uses, loaded with dlopen the first time a rediss:// URL needs
// them: a process that does not use TLS never loads or relocates libssl and libcrypto, which
// would otherwise cost every cron job's start-up time and memory.
// clang-format off
#define RLOCK_OPENSSL_FUNCTIONS(X)                                                                  \
  X(TLS_client_method) X(SSL_CTX_new) X(SSL_CTX_free) X(SSL_CTX_ctrl) X(SSL_CTX_set_verify)       \
  X(SSL_CTX_load_verify_locations) X(SSL_CTX_set_default_verify_paths)                            \
  X(SSL_CTX_use_certificate_chain_file) X(SSL_CTX_use_PrivateKey_file) X(SSL_CTX_check_private_key) \
  X(SSL_new) X(SSL_free) X(SSL_set_fd) X(SSL_ctrl) X(SSL_get0_param) X(SSL_connect)              \
  X(SSL_get_error) X(SSL_get_verify_result) X(SSL_read) X(SSL_write)                              \
  X(X509_VERIFY_PARAM_set_hostflags) X(X509_VERIFY_PARAM_set1_ip_asc)                             \
  X(X509_VERIFY_PARAM_set1_host) X(X509_verify_cert_error_string) X(ERR_get_error)                \
  X(ERR_peek_error) X(ERR_clear_error) X(ERR_error_string_n)
// clang-format on

struct OpenSsl {
// NOLINTNEXTLINE(bugprone-macro-parentheses): name is a declarator, not an expression
#define RLOCK_OPENSSL_POINTER(name) decltype(&::name) name = nullptr;
  RLOCK_OPENSSL_FUNCTIONS(RLOCK_OPENSSL_POINTER)
#undef RLOCK_OPENSSL_POINTER
};

// The loaded functions. Throws rlock::Error 71 when libssl.so.3 cannot be loaded.
const OpenSsl& openssl();

}  // namespace rlock::redis
