# The tests' throwaway PostgreSQL cluster (unix socket in a temp dir, run as the `postgres` user) and PgBouncer in
# front of it, for scripts/test and for scripts/test-trixie inside its Debian 13 container. Source it, then
#   trap test_db_stop EXIT INT TERM; test_db_start
# which exports TEST_DATABASE_URL, TEST_POOLER_URL and TEST_PG_BINDIR for the test suite.

source "$(dirname "${BASH_SOURCE[0]}")/pg.sh"

test_db_start() {
  # Debian's postgresql package starts a cluster on 5432; we do not use it.
  work="$(mktemp -d /tmp/medication-worker-test.XXXXXX)"
  pg_cluster_start "$work" fsync=off max_connections=300
  export TEST_DATABASE_URL="host=$work user=postgres dbname=postgres"

  # PgBouncer in transaction mode in front of it, as managed hosts offer (SPEC §3 "Connection poolers"):
  # SCRAM from a userlist, every database passed through, no prepared statements (1.18 has no support).
  pooler_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  cat >"$work/pgbouncer.ini" <<EOF
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
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
EOF
  echo '"postgres" "pooler-test-secret"' >"$work/userlist.txt"
  chown postgres "$work/pgbouncer.ini" "$work/userlist.txt"
  as_postgres pgbouncer -d "$work/pgbouncer.ini"
  export TEST_POOLER_URL="host=127.0.0.1 port=$pooler_port user=postgres password=pooler-test-secret"
  export TEST_PG_BINDIR="$PG_BINDIR"
  echo "${TEST_DB_WHO:-scripts/test}: PostgreSQL $("$PG_BINDIR/postgres" --version | awk '{ print $3 }') running at $work," \
    "PgBouncer (transaction mode) on 127.0.0.1:$pooler_port" >&2
}

test_db_stop() {
  [[ -n "${work:-}" ]] || return 0
  [[ -f "$work/pgbouncer.pid" ]] && kill "$(cat "$work/pgbouncer.pid")" 2>/dev/null || true
  pg_cluster_stop "$work"
  rm -rf "$work"
}
