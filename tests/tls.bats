#!/usr/bin/env bats
# TLS: rediss:// URLs, certificate verification (CA, host name, validity), --insecure, client
# certificates, and where the TLS options come from (argv, environment, config file).
#
# The certificates and the TLS-only redis-servers (--port 0 --tls-port P) are made once for the
# file (setup_file): one for each server certificate, and one that requires a client
# certificate; the tests leave no lock held on them. A test whose server needs a password
# starts its own (tls_start).

load helpers/common
load helpers/servers

setup_file() {
  export TLS_DIR=$BATS_FILE_TMPDIR/certs
  tls_make_certs "$TLS_DIR" || {
    echo "could not make the test certificates" >&2
    return 1
  }
  tls_start server || return 1
  export TLS_PORT_server=$TLS_PORT
  tls_start wronghost || return 1
  export TLS_PORT_wronghost=$TLS_PORT
  tls_start expired || return 1
  export TLS_PORT_expired=$TLS_PORT
  TLS_NAME=tls-clientauth tls_start server --tls-auth-clients yes || return 1
  export TLS_PORT_clientauth=$TLS_PORT
}

teardown_file() {
  servers_teardown_file
}

setup() {
  common_setup
  C=$TLS_DIR
}

# tls_use NAME: the file's TLS server NAME (server, wronghost, expired: the certificate it
# shows; clientauth: server's, and it requires a client certificate). Exports TLS_PORT and
# RLOCK_TLS_URL, as tls_start does.
tls_use() {
  local port=TLS_PORT_$1
  [[ -n ${!port-} ]] || fail "tls_use: no server $1"
  SRV_TLS_CLI=(--insecure --cert "$TLS_DIR/client.pem" --key "$TLS_DIR/client.key")
  export TLS_PORT=${!port}
  export RLOCK_TLS_URL="rediss://127.0.0.1:$TLS_PORT"
}

teardown() {
  common_teardown
}

# The key of lock $1 exists on the TLS server.
tls_lock_held() { [[ $(tcli exists "$(lock_key "$1")" 2>/dev/null) == 1 ]]; }
tls_lock_free() { [[ $(tcli exists "$(lock_key "$1")" 2>/dev/null) == 0 ]]; }

# assert_tls_error: the last `run --separate-stderr` was exit 69 with one error line that names
# the URL and matches the extended regular expression $1 (case-insensitive).
assert_tls_error() {
  assert_error_exit 69
  [[ $stderr == *"rediss://127.0.0.1:$TLS_PORT"* ]] || fail "the error does not name the URL: '$stderr'"
  grep -qiE "$1" <<<"$stderr" || fail "the error does not match /$1/: '$stderr'"
}

@test "rediss:// with --cacert: run, acquire, status, list, extend and release work" {
  tls_use server
  local u=(-u "$RLOCK_TLS_URL" --cacert "$C/ca.pem")
  run --separate-stderr rlock run k "${u[@]}" -- sh -c 'echo "held $RLOCK_KEY"'
  assert_success
  assert_output "held k"
  assert_equal "$stderr" ""

  run --separate-stderr rlock acquire k "${u[@]}" --token-file "$T/token"
  assert_success
  tls_lock_held k
  run --separate-stderr rlock status k "${u[@]}"
  assert_success
  [[ $output == *k* ]]
  run --separate-stderr rlock list "${u[@]}"
  assert_success
  [[ $output == *k* ]]
  run --separate-stderr rlock extend k "${u[@]}" --token-file "$T/token"
  assert_success
  run --separate-stderr rlock release k "${u[@]}" --token-file "$T/token"
  assert_success
  tls_lock_free k
  run --separate-stderr rlock status k "${u[@]}"
  assert_failure 1
}

@test "a CA bundle with an unrelated CA first verifies too" {
  tls_use server
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/bundle.pem" -- true
  assert_success
}

@test "run renews over one TLS connection: a child longer than the TTL keeps the lock" {
  tls_use server
  # (Without renewals the lease would end 300ms before the child: the run would exit 76.)
  run --separate-stderr rlock run k -t 900ms -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" -- sleep 1.2
  assert_success
  tls_lock_free k
}

@test "TLS with a password (REDISCLI_AUTH) works" {
  SRV_PASS=tls-s3cret
  tls_start server --requirepass tls-s3cret
  REDISCLI_AUTH=tls-s3cret run --separate-stderr rlock run k -v -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" -- true
  assert_success
  [[ $stderr != *tls-s3cret* ]] || fail "the password shows in stderr: '$stderr'"
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" -- true
  assert_failure 77
}

@test "without --cacert the system CAs are used: the test CA is not one of them (69)" {
  tls_use server
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" -- true
  assert_tls_error 'certificate'
  tls_lock_free k
}

@test "a server certificate from another CA is refused with 69 and a message about the certificate" {
  tls_use server
  local t0 took
  t0=$(now_ms)
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca2.pem" -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_tls_error 'certificate'
  assert_file_not_exist "$T/ran"
  ((took < 3000)) || fail "took ${took}ms"
  for cmd in "acquire k" "status k" "list"; do
    run --separate-stderr rlock $cmd -u "$RLOCK_TLS_URL" --cacert "$C/ca2.pem"
    assert_tls_error 'certificate'
  done
}

@test "a certificate for another host name is refused with 69 (host name mismatch)" {
  tls_use wronghost
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" -- touch "$T/ran"
  assert_tls_error 'mismatch|host ?name|127\.0\.0\.1.*(not|does)|subject'
  assert_file_not_exist "$T/ran"
  tls_lock_free k
}

@test "the certificate's DNS name is checked when the URL names the host (localhost)" {
  getent hosts localhost | grep -q '^127\.0\.0\.1' || skip "localhost does not resolve to 127.0.0.1 here"
  tls_use server
  run --separate-stderr rlock run k -u "rediss://localhost:$TLS_PORT" --cacert "$C/ca.pem" -- true
  assert_success
  tls_use wronghost
  run --separate-stderr rlock run k -u "rediss://localhost:$TLS_PORT" --cacert "$C/ca.pem" -- true
  assert_error_exit 69
  [[ $stderr == *"rediss://localhost:$TLS_PORT"* ]] || fail "the error does not name the URL: '$stderr'"
}

@test "an expired server certificate is refused with 69" {
  tls_use expired
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" -- touch "$T/ran"
  assert_tls_error 'expired'
  assert_file_not_exist "$T/ran"
}

@test "--insecure connects despite a wrong CA, host name and expiry, with a warning on stderr" {
  local cert
  for cert in server wronghost expired; do
    tls_use "$cert"
    run --separate-stderr rlock run k --insecure -u "$RLOCK_TLS_URL" --cacert "$C/ca2.pem" -- echo ran
    assert_success
    assert_output ran
    [[ $stderr != *"rlock: error"* ]] || fail "an error with --insecure: '$stderr'"
    grep -qi 'warning' <<<"$stderr" || fail "no warning about --insecure: '$stderr'"
    grep -qiE 'insecure|verif' <<<"$stderr" || fail "the warning does not say what is insecure: '$stderr'"
    [[ $(wc -l <<<"$stderr") -le 2 ]] || fail "more than a warning: '$stderr'"
  done
}

@test "a server that requires a client certificate: without --cert/--key 69, with them success" {
  tls_use clientauth
  # With TLS 1.3 the server refuses after the handshake, so how the refusal reaches the client
  # varies (an alert, or a closed connection): the message must give the reason every time.
  local i
  for i in 1 2 3 4 5; do
    run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" -- touch "$T/ran"
    assert_tls_error 'certificate'
    run --separate-stderr rlock status k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem"
    assert_tls_error 'certificate'
  done
  assert_file_not_exist "$T/ran"

  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" \
    --cert "$C/client.pem" --key "$C/client.key" -- echo ran
  assert_success
  assert_output ran
  run --separate-stderr rlock status k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" \
    --cert "$C/client.pem" --key "$C/client.key"
  assert_failure 1
}

@test "a client certificate from a CA the server does not trust is refused with 69" {
  tls_use clientauth
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" \
    --cert "$C/client2.pem" --key "$C/client2.key" -- touch "$T/ran"
  assert_error_exit 69
  assert_file_not_exist "$T/ran"
}

@test "--cert without --key (or a key that does not match) is a configuration error (78)" {
  tls_use clientauth
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" --cert "$C/client.pem" -- true
  # CLI11-level "requires --key" (64) or rlock's own check (78): a clear error either way.
  [[ $status == 64 || $status == 78 ]] || fail "expected 64 or 78, got $status: '$stderr'"
  assert_error_exit "$status"
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" \
    --cert "$C/client.pem" --key "$C/client2.key" -- true
  assert_error_exit 78
}

@test "a plain-text server on a rediss:// URL fails with 69 within the connect timeout, no hang" {
  redis_start
  local t0 took
  t0=$(now_ms)
  run --separate-stderr timeout 10 rlock run k --connect-timeout 500ms --io-timeout 500ms \
    -u "rediss://127.0.0.1:$REDIS_PORT" --cacert "$C/ca.pem" -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_error_exit 69
  [[ $stderr == *"rediss://127.0.0.1:$REDIS_PORT"* ]] || fail "the error does not name the URL: '$stderr'"
  grep -qiE 'tls|ssl|handshake' <<<"$stderr" || fail "the error does not say it is about TLS: '$stderr'"
  assert_file_not_exist "$T/ran"
  ((took < 2500)) || fail "took ${took}ms"
  lock_free k
}

@test "a TLS port on a plain redis:// URL fails with 69 within the timeouts, no hang" {
  tls_use server
  local t0 took
  t0=$(now_ms)
  run --separate-stderr timeout 10 rlock run k --connect-timeout 1s --io-timeout 1s \
    -u "redis://127.0.0.1:$TLS_PORT" -- touch "$T/ran"
  took=$(elapsed_ms "$t0")
  assert_error_exit 69
  assert_file_not_exist "$T/ran"
  ((took < 3500)) || fail "took ${took}ms"
}

@test "an unreadable --cacert, --cert or --key is a configuration error (78) naming the file" {
  tls_use clientauth
  local u=(-u "$RLOCK_TLS_URL")
  run --separate-stderr rlock run k "${u[@]}" --cacert "$T/no-such-ca.pem" -- touch "$T/ran"
  assert_error_exit 78
  [[ $stderr == *"$T/no-such-ca.pem"* ]] || fail "the error does not name the file: '$stderr'"
  run --separate-stderr rlock status k "${u[@]}" --cacert "$T"
  assert_error_exit 78
  run --separate-stderr rlock run k "${u[@]}" --cacert "$C/ca.pem" --cert "$T/no-such.pem" --key "$C/client.key" -- true
  assert_error_exit 78
  [[ $stderr == *"$T/no-such.pem"* ]] || fail "the error does not name the file: '$stderr'"
  run --separate-stderr rlock run k "${u[@]}" --cacert "$C/ca.pem" --cert "$C/client.pem" --key "$T/no-such.key" -- true
  assert_error_exit 78
  [[ $stderr == *"$T/no-such.key"* ]] || fail "the error does not name the file: '$stderr'"
  assert_file_not_exist "$T/ran"
}

@test "a --cacert that is not a certificate is a configuration error (78)" {
  tls_use server
  echo "not a certificate" >"$T/garbage.pem"
  run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$T/garbage.pem" -- touch "$T/ran"
  assert_error_exit 78
  assert_file_not_exist "$T/ran"
}

@test "RLOCK_CACERT, RLOCK_CERT and RLOCK_TLS_KEY set the TLS options" {
  tls_use clientauth
  RLOCK_URL=$RLOCK_TLS_URL RLOCK_CACERT=$C/ca.pem RLOCK_CERT=$C/client.pem RLOCK_TLS_KEY=$C/client.key \
    run --separate-stderr rlock run k -- echo ran
  assert_success
  assert_output ran
  # RLOCK_CACERT is really used: pointing it at the other CA fails.
  RLOCK_URL=$RLOCK_TLS_URL RLOCK_CACERT=$C/ca2.pem RLOCK_CERT=$C/client.pem RLOCK_TLS_KEY=$C/client.key \
    run --separate-stderr rlock run k -- true
  assert_error_exit 69
  # The command line wins over the environment.
  RLOCK_URL=$RLOCK_TLS_URL RLOCK_CACERT=$C/ca2.pem RLOCK_CERT=$C/client.pem RLOCK_TLS_KEY=$C/client.key \
    run --separate-stderr rlock run k --cacert "$C/ca.pem" -- true
  assert_success
}

@test "RLOCK_KEY (set by run for its child) is not taken as the TLS key: nested rlock over TLS works" {
  tls_use clientauth
  export RLOCK_URL=$RLOCK_TLS_URL RLOCK_CACERT=$C/ca.pem RLOCK_CERT=$C/client.pem RLOCK_TLS_KEY=$C/client.key
  run --separate-stderr rlock run outer -- sh -c 'rlock run inner -- sh -c "echo \$RLOCK_KEY"; rlock status outer >/dev/null && echo outer-held'
  assert_success
  assert_output $'inner\nouter-held'
  RLOCK_KEY=/no/such/file run --separate-stderr rlock run k -- true
  assert_success
}

@test "RLOCK_INSECURE=1 skips verification with a warning" {
  tls_use expired
  RLOCK_INSECURE=1 run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" -- echo ran
  assert_success
  assert_output ran
  grep -qi 'warning' <<<"$stderr" || fail "no warning: '$stderr'"
  RLOCK_INSECURE=0 run --separate-stderr rlock run k -u "$RLOCK_TLS_URL" --cacert "$C/ca.pem" -- true
  assert_error_exit 69
}

@test "the config file sets cacert, cert, key and insecure" {
  tls_use clientauth
  cat >"$T/rlock.toml" <<EOF
url = "$RLOCK_TLS_URL"
cacert = "$C/ca.pem"
cert = "$C/client.pem"
key = "$C/client.key"
EOF
  run --separate-stderr rlock run k --config "$T/rlock.toml" -- echo ran
  assert_success
  assert_output ran
  RLOCK_CONFIG=$T/rlock.toml run --separate-stderr rlock status k
  assert_failure 1
  # The default config file ($XDG_CONFIG_HOME/rlock/config.toml) too.
  mkdir -p "$XDG_CONFIG_HOME/rlock"
  cp "$T/rlock.toml" "$XDG_CONFIG_HOME/rlock/config.toml"
  run --separate-stderr rlock run k -- echo ran
  assert_success

  tls_use expired
  cat >"$T/insecure.toml" <<EOF
url = "$RLOCK_TLS_URL"
insecure = true
EOF
  run --separate-stderr rlock run k --config "$T/insecure.toml" -- echo ran
  assert_success
  assert_output ran
  grep -qi 'warning' <<<"$stderr" || fail "no warning: '$stderr'"
}

@test "an unreadable cacert from the config file is 78 too" {
  tls_use server
  cat >"$T/rlock.toml" <<EOF
url = "$RLOCK_TLS_URL"
cacert = "$T/no-such-ca.pem"
EOF
  run --separate-stderr rlock run k --config "$T/rlock.toml" -- touch "$T/ran"
  assert_error_exit 78
  assert_file_not_exist "$T/ran"
}
