#include "openssl.hpp"

#include "error.hpp"
#include "exit_code.hpp"

#include <dlfcn.h>

#include <fmt/core.h>

namespace rlock::redis {

const OpenSsl& openssl() {
  static OpenSsl api;
  static bool loaded = false;
  if (loaded) return api;
  void* ssl = ::dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
  if (!ssl) {
    throw Error(exit_code::k_system,
                fmt::format("rediss:// needs OpenSSL 3 (Debian: apt-get install libssl3): {}", ::dlerror()));
  }
  // dlsym on libssl's handle also finds libcrypto's functions: it is one of libssl's dependencies.
#define RLOCK_OPENSSL_LOAD(name)                                        \
  api.name = reinterpret_cast<decltype(api.name)>(::dlsym(ssl, #name)); \
  if (!api.name) throw Error(exit_code::k_system, fmt::format("libssl.so.3 has no {}", #name));
  RLOCK_OPENSSL_FUNCTIONS(RLOCK_OPENSSL_LOAD)
#undef RLOCK_OPENSSL_LOAD
  loaded = true;
  return api;
}

}  // namespace rlock::redis
