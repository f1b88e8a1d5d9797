#!/usr/bin/env bats
# The packages. `cpack -G DEB` in the build directory gives
# rlock_<version>_<arch>.deb, with the binary, the man pages rlock(1) and
# rlock(7) and the shell completions under /usr, which dpkg installs into a root
# of the test's own and removes again. `cpack -G RPM` gives
# rlock-<version>-1.<arch>.rpm with the same six files, byte for byte, and its own
# dependencies (inspected with rpm -qp, and unpacked with rpm2archive). `make
# package_source` gives rlock-<version>.tar.gz, the same bytes every time for
# the same tracked files.
#
# Nothing is installed into the system: each test unpacks or installs into its
# own temporary directory (dpkg --root with a database of its own), and runs the
# binary, the man pages and the completions from there. The Debian package tests
# need dpkg; the RPM tests also need rpmbuild and rpm2archive (Debian package rpm);
# the source tarball test needs only a git checkout.
#
# Environment: RLOCK_BUILD_DIR (default: ../build next to this file), a
# configured and built tree; RLOCK_SOURCE_DIR (default: .. next to this file).

load '/usr/lib/bats/bats-support/load'
load '/usr/lib/bats/bats-assert/load'

# Prints why the tests cannot run here, or nothing.
why_skip() {
  if ! command -v dpkg >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "dpkg is not installed: the Debian package can only be tested on a dpkg-based system"
  fi
}

setup_file() {
  export RLOCK_BUILD_DIR="${RLOCK_BUILD_DIR:-$BATS_TEST_DIRNAME/../build}"
  export RLOCK_SOURCE_DIR="${RLOCK_SOURCE_DIR:-$BATS_TEST_DIRNAME/..}"
  PKG_OUT=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/rlock-pkg.XXXXXX")
  export PKG_OUT
  PKG_VERSION=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' \
    "$RLOCK_BUILD_DIR/CPackConfig.cmake" 2>/dev/null)
  export PKG_VERSION
  PKG_SKIP_REASON=$(why_skip)
  export PKG_SKIP_REASON

  # The source tarball's first build, here: its test builds it again, after the packages below
  # were built, so in a later second.
  PKG_SOURCE_STATUS=skip
  if git -C "$RLOCK_SOURCE_DIR" rev-parse --git-dir >/dev/null 2>&1 && [[ -n $PKG_VERSION ]]; then
    PKG_SOURCE_STATUS=0
    cmake --build "$RLOCK_BUILD_DIR" --target package_source >"$PKG_OUT/package_source.log" 2>&1 ||
      PKG_SOURCE_STATUS=$?
    PKG_SOURCE_SECOND=${EPOCHREALTIME%[.,]*}
    export PKG_SOURCE_SECOND
    if [[ $PKG_SOURCE_STATUS == 0 ]]; then
      mv "$RLOCK_BUILD_DIR/rlock-$PKG_VERSION.tar.gz" "$PKG_OUT/first.tar.gz" || PKG_SOURCE_STATUS=mv
    fi
  fi
  export PKG_SOURCE_STATUS
  [[ -z $PKG_SKIP_REASON ]] || return 0

  # Build the packages once, into a temporary directory (-B), so that the build
  # tree gets no .deb, no .rpm and no _CPack_Packages of ours.
  PKG_ARCH=$(dpkg --print-architecture)
  export PKG_ARCH
  PKG_DEB="$PKG_OUT/rlock_${PKG_VERSION}_${PKG_ARCH}.deb"
  export PKG_DEB
  PKG_CPACK_STATUS=0
  (cd "$RLOCK_BUILD_DIR" && cpack -G DEB -B "$PKG_OUT") >"$PKG_OUT/cpack.log" 2>&1 ||
    PKG_CPACK_STATUS=$?
  export PKG_CPACK_STATUS

  PKG_RPM_SKIP_REASON=
  if ! command -v rpmbuild >/dev/null || ! command -v rpm >/dev/null; then
    PKG_RPM_SKIP_REASON="rpmbuild is not installed (Debian: apt-get install rpm)"
  fi
  export PKG_RPM_SKIP_REASON
  [[ -z $PKG_RPM_SKIP_REASON ]] || return 0
  # rpmbuild and rpm -qp open an RPM database (Debian's rpm: ~/.rpmdb) and rpmbuild
  # writes its scripts into /var/tmp: both go to the test's directory instead, with
  # a HOME of its own whose ~/.rpmmacros says so.
  mkdir -p "$PKG_OUT/home" "$PKG_OUT/rpmdb" "$PKG_OUT/rpmtmp"
  printf '%%_dbpath %s\n%%_tmppath %s\n' "$PKG_OUT/rpmdb" "$PKG_OUT/rpmtmp" >"$PKG_OUT/home/.rpmmacros"
  PKG_RPM_ARCH=$(rpm --eval '%{_target_cpu}')
  export PKG_RPM_ARCH
  PKG_RPM="$PKG_OUT/rlock-${PKG_VERSION}-1.${PKG_RPM_ARCH}.rpm"
  export PKG_RPM
  PKG_RPM_STATUS=0
  (cd "$RLOCK_BUILD_DIR" && HOME="$PKG_OUT/home" cpack -G RPM -B "$PKG_OUT") >"$PKG_OUT/cpack-rpm.log" 2>&1 ||
    PKG_RPM_STATUS=$?
  export PKG_RPM_STATUS
}

teardown_file() {
  if [[ -n ${PKG_OUT:-} && -d $PKG_OUT ]]; then
    rm -rf -- "$PKG_OUT"
  fi
}

# Skips the test unless this host can build the Debian package.
need_package_host() {
  [[ -z $PKG_SKIP_REASON ]] || skip "$PKG_SKIP_REASON"
}

# Fails unless the package file exists (the first test shows cpack's log).
require_package() {
  need_package_host
  if [[ ! -f $PKG_DEB ]]; then
    echo "no package at $PKG_DEB (cpack exit status $PKG_CPACK_STATUS; see the first test)" >&2
    return 1
  fi
}

# dpkg on the directory $1, a root of its own: the files, dpkg's database and its
# log all under it, so that the system's dpkg never hears of the package. As root
# only: dpkg installs files owned by root:root. Depends (libc6...) cannot be met
# in an empty database: --force-depends. (The package has no maintainer scripts;
# dpkg would run them chrooted into the root.)
dpkg_root() {
  local root=$1
  shift
  dpkg --root="$root" --admindir="$root/var/lib/dpkg" --log="$root/var/log/dpkg.log" \
    --force-depends "$@"
}

install_package_into() {
  local root=$1
  require_package
  [[ $(id -u) -eq 0 ]] || skip "needs root: dpkg --root installs files owned by root"
  mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/log"
  : >"$root/var/lib/dpkg/status"
  run dpkg_root "$root" -i "$PKG_DEB"
  assert_success
}

# rpm with the test's own HOME (see setup_file).
rpm_query() {
  HOME="$PKG_OUT/home" rpm "$@"
}

# Fails unless the RPM exists (skips without rpmbuild).
require_rpm() {
  need_package_host
  [[ -z $PKG_RPM_SKIP_REASON ]] || skip "$PKG_RPM_SKIP_REASON"
  if [[ ! -f $PKG_RPM ]]; then
    cat "$PKG_OUT/cpack-rpm.log" >&2
    ls -l "$PKG_OUT" >&2
    fail "no package at $PKG_RPM (cpack -G RPM exit status $PKG_RPM_STATUS)"
  fi
}

# The six files both packages hold, sorted.
package_files() {
  printf '%s\n' \
    /usr/bin/rlock \
    /usr/share/bash-completion/completions/rlock \
    /usr/share/fish/vendor_completions.d/rlock.fish \
    /usr/share/man/man1/rlock.1.gz \
    /usr/share/man/man7/rlock.7.gz \
    /usr/share/zsh/vendor-completions/_rlock | LC_ALL=C sort
}

@test "cpack -G DEB builds rlock_<version>_<arch>.deb into the -B directory" {
  need_package_host
  [[ -f $RLOCK_BUILD_DIR/CPackConfig.cmake ]] ||
    fail "no CPackConfig.cmake in $RLOCK_BUILD_DIR: configure and build first (cmake -S . -B build && cmake --build build)"
  [[ -n $PKG_VERSION ]] || fail "no CPACK_PACKAGE_VERSION in $RLOCK_BUILD_DIR/CPackConfig.cmake"
  if [[ $PKG_CPACK_STATUS -ne 0 ]]; then
    cat "$PKG_OUT/cpack.log" >&2
    fail "cpack -G DEB exited with $PKG_CPACK_STATUS"
  fi
  if [[ ! -f $PKG_DEB ]]; then
    ls -l "$PKG_OUT" >&2
    fail "cpack succeeded but wrote no $(basename "$PKG_DEB")"
  fi
}

@test "the package's control fields: name, version, section, depends, recommends" {
  require_package
  run dpkg-deb -f "$PKG_DEB" Package
  assert_output "rlock"
  run dpkg-deb -f "$PKG_DEB" Version
  assert_output "$PKG_VERSION"
  run dpkg-deb -f "$PKG_DEB" Architecture
  assert_output "$PKG_ARCH"
  run dpkg-deb -f "$PKG_DEB" Section
  assert_output "utils"
  run dpkg-deb -f "$PKG_DEB" Maintainer
  assert_output --regexp '^.+ <[^>]+@[^>]+>$'
  run dpkg-deb -f "$PKG_DEB" Description
  assert_line --index 0 --regexp '^[a-z].{10,79}$'
  # dpkg-shlibdeps ran: Depends names at least the C library.
  run dpkg-deb -f "$PKG_DEB" Depends
  assert_output --partial "libc6"
  run dpkg-deb -f "$PKG_DEB" Recommends
  assert_output --partial "redis-tools"
  # rediss:// loads libssl.so.3 with dlopen, which dpkg-shlibdeps cannot see.
  assert_output --partial "libssl3"
}

@test "the package holds exactly the binary, two man pages and three completions, under /usr" {
  require_package
  run bash -c "dpkg-deb --fsys-tarfile '$PKG_DEB' | tar -t | grep -v '/\$' | sort"
  assert_success
  assert_output "$(package_files | sed 's,^,.,')"
  # Files owned by root, no group- or world-writable entries.
  run bash -c "dpkg-deb -c '$PKG_DEB' | awk '\$2 != \"root/root\" || \$1 ~ /^.....w|^........w/'"
  assert_success
  assert_output ""
}

@test "cpack -G RPM builds rlock-<version>-1.<arch>.rpm: its tags, requires, recommends, suggests" {
  require_rpm
  require_package
  run rpm_query -qp --qf '%{NAME}|%{VERSION}|%{RELEASE}|%{ARCH}|%{GROUP}|%{PREFIXES}\n' "$PKG_RPM"
  assert_success
  # PREFIXES (none): not relocatable, the files stay where the shells look.
  assert_output "rlock|$PKG_VERSION|1|$PKG_RPM_ARCH|Applications/System|(none)"
  # Summary and description are the .deb's.
  run rpm_query -qp --qf '%{SUMMARY}\n%{DESCRIPTION}\n' "$PKG_RPM"
  assert_success
  assert_output "$(dpkg-deb -f "$PKG_DEB" Description | sed 's/^ //')"

  # Requires: rpmbuild's elfdeps ran, and found exactly the shared libraries the
  # binary links (its DT_NEEDED entries), nothing more.
  local needed
  needed=$(readelf -d "$RLOCK_BUILD_DIR/rlock" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' | LC_ALL=C sort -u)
  [[ -n $needed ]] || fail "readelf found no NEEDED entry in $RLOCK_BUILD_DIR/rlock"
  run bash -c "HOME='$PKG_OUT/home' rpm -qp --requires '$PKG_RPM' | sed -n 's/^\([^ (]*\.so[^ (]*\)(.*/\1/p' | LC_ALL=C sort -u"
  assert_success
  assert_output "$needed"
  # libssl.so.3 is loaded with dlopen for rediss:// only: recommended, not required.
  run rpm_query -qp --recommends "$PKG_RPM"
  assert_success
  assert_output --regexp '^libssl\.so\.3\(\)(\(64bit\))?$'
  run rpm_query -qp --suggests "$PKG_RPM"
  assert_success
  assert_output "redis"
}

@test "the RPM holds the .deb's six files, byte for byte, with the same modes, owned by root" {
  require_rpm
  require_package
  # Only the files: no directory the system owns, no /usr/lib/.build-id links.
  run rpm_query -qlp "$PKG_RPM"
  assert_success
  assert_output "$(package_files)"

  local root="$PKG_OUT/deb-root" expected="" f
  dpkg-deb -x "$PKG_DEB" "$root"
  while read -r f; do
    expected+="$(stat -c %A "$root$f") root:root $(sha256sum <"$root$f" | cut -d' ' -f1) $f"$'\n'
  done < <(package_files)
  run rpm_query -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILEDIGESTS} %{FILENAMES}\n]' "$PKG_RPM"
  assert_success
  assert_output "${expected%$'\n'}"
}

# Checks the installed files under the root $1: the binary runs and tells the
# package's version, the man pages are the build's and man reads them, and each
# completion is where its shell looks and loads.
check_installed_files() {
  local root=$1
  [[ -x $root/usr/bin/rlock ]] || fail "$root/usr/bin/rlock is missing or not executable"
  run "$root/usr/bin/rlock" --version
  assert_success
  # The package's version, and what git describe adds to it in a checkout (cmake/version.cmake).
  assert_line --index 0 --regexp "^rlock ${PKG_VERSION//./\\.}([-+].*)?\$"

  # Man pages: gzip-compressed, reproducible (no name, no time stamp), the same
  # text as the build generated from man/*.scd with scdoc, where man finds them.
  local page section
  for section in 1 7; do
    page=$root/usr/share/man/man$section/rlock.$section.gz
    [[ -f $page ]] || fail "$page is missing"
    run gzip -t "$page"
    assert_success
    run od -An -tx1 -j3 -N5 "$page"
    assert_output --regexp '^ *00 00 00 00 00 *$'
    run cmp <(gzip -dc "$page") "$RLOCK_BUILD_DIR/man/rlock.$section"
    assert_success
    if command -v man >/dev/null; then
      run env MANPATH="$root/usr/share/man" man -w "$section" rlock
      assert_success
      assert_output "$page"
    fi
  done
  if command -v man >/dev/null; then
    run env MANWIDTH=80 MAN_KEEP_FORMATTING= man -l -P cat "$root/usr/share/man/man1/rlock.1.gz"
    assert_success
    assert_output --partial "distributed lock for shell scripts"
    run env MANWIDTH=80 MAN_KEEP_FORMATTING= man -l -P cat "$root/usr/share/man/man7/rlock.7.gz"
    assert_success
    assert_output --partial "REDIS DATA LAYOUT"
  fi

  # Completions where each shell looks for them by default.
  local bash_c=$root/usr/share/bash-completion/completions/rlock
  local zsh_c=$root/usr/share/zsh/vendor-completions/_rlock
  local fish_c=$root/usr/share/fish/vendor_completions.d/rlock.fish
  [[ -f $bash_c ]] || fail "$bash_c is missing"
  [[ -f $zsh_c ]] || fail "$zsh_c is missing"
  [[ -f $fish_c ]] || fail "$fish_c is missing"
  # bash-completion loads the file on demand by command name: sourcing it must
  # register a completion for rlock.
  run bash -c "source '$bash_c' && complete -p rlock"
  assert_success
  assert_output --partial " rlock"
  if command -v zsh >/dev/null; then
    run zsh -n "$zsh_c"
    assert_success
  fi
  if command -v fish >/dev/null; then
    run fish --no-execute "$fish_c"
    assert_success
  fi
}

# What the system's dpkg and /usr/bin say of rlock, to compare before and after.
system_rlock_state() {
  echo "dpkg: $(dpkg-query -W -f='${db:Status-Status}' rlock 2>/dev/null || true)"
  ls -l --time-style=+%s.%N /usr/bin/rlock 2>&1 || true
}

@test "the .deb unpacked: a working usr/bin/rlock, the man pages and the completions, with their modes" {
  require_package
  local root="$BATS_TEST_TMPDIR/root"
  run dpkg-deb -x "$PKG_DEB" "$root"
  assert_success
  # The binary 755, everything else 644.
  run bash -c "cd '$root' && find . ! -type d -printf '%m %p\n' | LC_ALL=C sort -k2"
  assert_success
  assert_output "$(package_files | sed 's,^,.,' | while read -r f; do
    if [[ $f == ./usr/bin/rlock ]]; then echo "755 $f"; else echo "644 $f"; fi
  done)"
  check_installed_files "$root"
}

@test "dpkg installs into a root of its own and dpkg -r removes every file; the system never sees it" {
  local before
  before=$(system_rlock_state)
  local root="$BATS_TEST_TMPDIR/root"
  install_package_into "$root"
  check_installed_files "$root"

  run dpkg_root "$root" -s rlock
  assert_success
  assert_line "Status: install ok installed"
  run dpkg_root "$root" -L rlock
  assert_success
  local files=() f
  for f in "${lines[@]}"; do
    [[ -f $root$f ]] && files+=("$root$f")
  done
  local expected=6
  if grep -qs '^path-exclude=/usr/share/man' /etc/dpkg/dpkg.cfg.d/*; then
    expected=4
  fi
  [[ ${#files[@]} -eq $expected ]] ||
    fail "expected $expected installed files, dpkg -L lists: ${lines[*]}"
  # The system's dpkg and /usr/bin are as they were.
  assert_equal "$(system_rlock_state)" "$before"

  run dpkg_root "$root" -r rlock
  assert_success
  for f in "${files[@]}"; do
    [[ ! -e $f ]] || fail "$f is still there after dpkg -r rlock"
  done
  run dpkg_root "$root" -s rlock
  refute_line "Status: install ok installed"
  assert_equal "$(system_rlock_state)" "$before"
}

@test "the RPM unpacked: the .deb's files, the same bytes and modes, a working binary" {
  require_rpm
  require_package
  command -v rpm2archive >/dev/null || skip "rpm2archive is not installed (Debian: apt-get install rpm2cpio)"
  local root="$BATS_TEST_TMPDIR/rpm-root" deb_root="$BATS_TEST_TMPDIR/deb-root"
  mkdir "$root"
  run bash -c "rpm2archive -n <'$PKG_RPM' | tar -x -C '$root'"
  assert_success
  dpkg-deb -x "$PKG_DEB" "$deb_root"
  run bash -c "cd '$root' && find . ! -type d -printf '%m %p\n' | LC_ALL=C sort -k2"
  assert_success
  assert_output "$(cd "$deb_root" && find . ! -type d -printf '%m %p\n' | LC_ALL=C sort -k2)"
  run diff -r "$deb_root" "$root"
  assert_success
  check_installed_files "$root"
}

@test "make package_source gives the same rlock-<version>.tar.gz twice: the tracked files, 0:0, one date" {
  git -C "$RLOCK_SOURCE_DIR" rev-parse --git-dir >/dev/null 2>&1 ||
    skip "$RLOCK_SOURCE_DIR is not a git checkout: package_source packs the files git tracks"
  [[ -n $PKG_VERSION ]] || fail "no CPACK_PACKAGE_VERSION in $RLOCK_BUILD_DIR/CPackConfig.cmake: configure first"
  local tarball="$RLOCK_BUILD_DIR/rlock-$PKG_VERSION.tar.gz"
  local readme="$RLOCK_SOURCE_DIR/README.md"

  # The first build ran in setup_file.
  if [[ $PKG_SOURCE_STATUS != 0 ]]; then
    cat "$PKG_OUT/package_source.log" >&2
    fail "the first make package_source failed ($PKG_SOURCE_STATUS)"
  fi
  # Again in a later second, with a newer mtime on a tracked file (README.md, which
  # nothing builds from; its mtime is put back before any assertion).
  while ((${EPOCHREALTIME%[.,]*} <= PKG_SOURCE_SECOND)); do
    sleep 0.1
  done
  touch -r "$readme" "$PKG_OUT/readme-mtime"
  touch "$readme"
  run cmake --build "$RLOCK_BUILD_DIR" --target package_source
  touch -r "$PKG_OUT/readme-mtime" "$readme"
  assert_success
  mv "$tarball" "$PKG_OUT/second.tar.gz"
  run cmp "$PKG_OUT/first.tar.gz" "$PKG_OUT/second.tar.gz"
  assert_success

  # Every entry: owner 0:0 without names, mode 644 or 755, dated SOURCE_DATE_EPOCH
  # or the last commit.
  local epoch
  epoch=${SOURCE_DATE_EPOCH:-$(git -C "$RLOCK_SOURCE_DIR" log -1 --format=%ct)}
  run bash -c "TZ=UTC tar -tvzf '$PKG_OUT/first.tar.gz' | awk '{print \$1, \$2, \$4, \$5}' | LC_ALL=C sort -u"
  assert_success
  local date
  date=$(TZ=UTC date -d "@$epoch" '+%Y-%m-%d %H:%M')
  assert_output "$(printf '%s\n' "-rw-r--r-- 0/0 $date" "-rwxr-xr-x 0/0 $date")"

  # One top directory, rlock-<version>, with the sources and nothing else: exactly
  # the files git tracks, so no build directory and no .git.
  local unpacked="$PKG_OUT/unpacked"
  mkdir "$unpacked"
  tar -xzf "$PKG_OUT/first.tar.gz" -C "$unpacked"
  run ls -A "$unpacked"
  assert_output "rlock-$PKG_VERSION"
  local top="$unpacked/rlock-$PKG_VERSION" p
  for p in CMakeLists.txt src man completions packaging/cpack.cmake; do
    [[ -e $top/$p ]] || fail "the tarball has no $p"
  done
  run find "$top" \( -name .git -o -type d -name 'build*' \) -print
  assert_output ""
  run bash -c "cd '$top' && find . ! -type d | sed 's,^\./,,' | LC_ALL=C sort"
  assert_output "$(git -C "$RLOCK_SOURCE_DIR" ls-files | LC_ALL=C sort)"
}
