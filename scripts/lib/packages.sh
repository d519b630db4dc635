# The one list of Debian packages this project needs (Debian 12 "bookworm" and 13 "trixie" alike), and the
# function that installs the missing ones. Every script that builds (swift build / swift test / swiftc, or
# scripts/lib/stack.sh's stack_init) sources this file and calls mw_ensure_packages first;
# scripts/check-packages (run by .ci/run) fails when one does not, or when a list of packages appears anywhere else.
#   source scripts/lib/packages.sh; mw_ensure_packages          # build, test, demo, faults, benches
#   source scripts/lib/packages.sh; mw_ensure_packages ci       # also packaging and the systemd test (.ci/run)

# Build: the C libraries behind Sources/C*/module.modulemap, and pkg-config to find them; what the Swift toolchain
# (/opt/swift, unpacked, not a Debian package) loads and links with on a bare Debian: a C/C++ toolchain and linker
# (g++: libc6-dev, libstdc++ and libgcc's -dev packages, binutils), SwiftPM's sqlite, ncurses, libxml2, libedit.
MW_PACKAGES=(libpq-dev libcurl4-openssl-dev libssl-dev libsystemd-dev libmicrohttpd-dev pkg-config
             g++ libsqlite3-0 libncurses6 libxml2 libedit2 zlib1g
# Run and test: a throwaway PostgreSQL, PgBouncer in front of it, nginx as a real HTTP/2 server (its echo module holds
# an answer for FCM's answer time: bench/run BENCH_ANSWER_MS), tinyproxy and stunnel4 as an egress proxy, and the
# tools the scripts call.
             postgresql pgbouncer nginx libnginx-mod-http-echo nghttp2-client tinyproxy stunnel4 openssl ca-certificates curl python3 systemd)
# CI only: the .deb (debhelper, lintian), the systemd test (debootstrap, systemd-nspawn), promtool (prometheus).
MW_CI_PACKAGES=(debhelper dpkg-dev lintian debootstrap systemd-container prometheus)

# mw_ensure_packages [ci]: installs whatever of the list is missing (apt-get; needs root when something is).
mw_ensure_packages() {
  local wanted=("${MW_PACKAGES[@]}") missing=() p
  [[ "${1:-}" == ci ]] && wanted+=("${MW_CI_PACKAGES[@]}")
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing Debian packages: ${missing[*]}; as root: apt-get install --no-install-recommends ${missing[*]}" >&2
    return 1
  fi
  echo "installing Debian packages: ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Their packages start services we do not want on a build machine: a Prometheus server (only promtool is
  # wanted), tinyproxy (the tests start their own). PostgreSQL's own cluster on 5432 is left alone, unused.
  local unit
  for unit in prometheus tinyproxy; do
    [[ " ${missing[*]} " == *" $unit "* ]] && { systemctl disable --now "$unit" >/dev/null 2>&1 || true; }
  done
  return 0
}

# Inside scripts/test-trixie's Debian 13 container (run-time names there: the t64 libraries): what the
# library-facing suites load and start. Not installed on the host.
MW_TRIXIE_TEST_PACKAGES=(libcurl4t64 libnghttp2-14 libpq5 libssl3t64 libmicrohttpd12t64 libsystemd0
                         postgresql pgbouncer nginx nghttp2-client tinyproxy stunnel4 openssl ca-certificates curl
                         python3 procps)
