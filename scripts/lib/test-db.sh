# The tests' throwaway PostgreSQL cluster (unix socket in a temp dir, run as the `postgres` user) and PgBouncer in
# front of it, for scripts/test and for scripts/test-trixie inside its Debian 13 container. Source it, then
#   trap test_db_stop EXIT INT TERM; test_db_start
# which exports TEST_DATABASE_URL, TEST_POOLER_URL, TEST_POOLER_PREPARED_STATEMENTS, TEST_UNTRACKED_POOLER_URL and
# TEST_PG_BINDIR for the test suite.

source "$(dirname "${BASH_SOURCE[0]}")/pg.sh"

test_db_start() {
  # Debian's postgresql package starts a cluster on 5432; we do not use it.
  work="$(mktemp -d /tmp/medication-worker-test.XXXXXX)"
  pg_cluster_start "$work" fsync=off max_connections=300
  export TEST_DATABASE_URL="host=$work user=postgres dbname=postgres"

  # PgBouncer in transaction mode in front of it, as managed hosts offer (SPEC §3 "Connection poolers"), SCRAM from
  # a userlist, every database passed through; with its own default for protocol-level prepared statements, written
  # out: none before 1.21 (bookworm's 1.18), 200 tracked per server session since (trixie's 1.24). Where it tracks
  # them, a second one with max_prepared_statements = 0 keeps the untracked behaviour covered as well.
  local version tracked=0
  version="$(pgbouncer --version | head -1 | awk '{ print $2 }')"
  [[ "$(printf '%s\n' 1.21 "$version" | sort -V | head -1)" == 1.21 ]] && tracked=200
  export TEST_POOLER_PREPARED_STATEMENTS=$tracked
  pooler_start pgbouncer "${tracked#0}"
  export TEST_POOLER_URL="host=127.0.0.1 port=$pooler_port user=postgres password=pooler-test-secret"
  export TEST_UNTRACKED_POOLER_URL=$TEST_POOLER_URL
  if ((tracked)); then
    pooler_start pgbouncer-untracked 0
    TEST_UNTRACKED_POOLER_URL="host=127.0.0.1 port=$pooler_port user=postgres password=pooler-test-secret"
  fi
  export TEST_PG_BINDIR="$PG_BINDIR"
  echo "${TEST_DB_WHO:-scripts/test}: PostgreSQL $("$PG_BINDIR/postgres" --version | awk '{ print $3 }') running at $work," \
    "PgBouncer $version (transaction mode, max_prepared_statements $tracked) at ${TEST_POOLER_URL%% user=*}" >&2
}

# pooler_start NAME [MAX_PREPARED_STATEMENTS]: a PgBouncer on a free port ($pooler_port), files $work/NAME.*.
pooler_start() {
  pooler_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  cat >"$work/$1.ini" <<EOF
[databases]
* = host=$work user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $pooler_port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $work/userlist.txt
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
logfile = $work/$1.log
pidfile = $work/$1.pid
EOF
  if [[ -n "${2:-}" ]]; then echo "max_prepared_statements = $2" >>"$work/$1.ini"; fi
  echo '"postgres" "pooler-test-secret"' >"$work/userlist.txt"
  chown postgres "$work/$1.ini" "$work/userlist.txt"
  as_postgres pgbouncer -d "$work/$1.ini"
}

test_db_stop() {
  [[ -n "${work:-}" ]] || return 0
  local pid
  for pid in "$work"/pgbouncer*.pid; do [[ -f "$pid" ]] && kill "$(cat "$pid")" 2>/dev/null; done
  pg_cluster_stop "$work"
  rm -rf "$work"
}
