# The one way scripts and tests start a throwaway PostgreSQL (source it; the test suite's TemporaryCluster runs
# `bash scripts/lib/pg.sh start|stop DIR ...` too). A cluster lives in DIR: data in DIR/data, its log DIR/log, its
# unix socket in DIR, no TCP unless a setting asks for it; it runs as the `postgres` user when we are root.
#   pg_find_bindir                       PG_BINDIR: pg_config's, else the newest server installed
#   pg_cluster_start DIR [name=value...] initdb (once) and start, each name=value a server setting (-c; later wins)
#   pg_cluster_restart DIR | pg_cluster_stop DIR [fast]   (immediate unless fast)
as_postgres() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

pg_find_bindir() {
  [[ -n "${PG_BINDIR:-}" ]] && return 0
  PG_BINDIR="$(pg_config --bindir 2>/dev/null || true)"
  [[ -x "$PG_BINDIR/initdb" ]] || PG_BINDIR="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [[ -x "$PG_BINDIR/initdb" ]] || { echo "pg.sh: no PostgreSQL server installed (initdb not found)" >&2; return 1; }
}

pg_cluster_start() {
  local dir=$1; shift
  pg_find_bindir || return 1
  mkdir -p "$dir"
  chown postgres "$dir" 2>/dev/null || true
  chmod 755 "$dir"
  if [[ ! -d "$dir/data" ]]; then
    as_postgres "$PG_BINDIR/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >/dev/null || return 1
  fi
  local opts="-k $dir -c listen_addresses=''" setting
  for setting in "$@"; do opts+=" -c $setting"; done
  as_postgres "$PG_BINDIR/pg_ctl" -D "$dir/data" -w -l "$dir/log" -o "$opts" start >/dev/null
}

pg_cluster_restart() { pg_find_bindir && as_postgres "$PG_BINDIR/pg_ctl" -D "$1/data" -w -m fast restart >/dev/null; }

pg_cluster_stop() {
  [[ -d "$1/data" ]] || return 0
  pg_find_bindir && as_postgres "$PG_BINDIR/pg_ctl" -D "$1/data" -w -m "${2:-immediate}" stop >/dev/null 2>&1 || true
}

# Run as a program (the test suite): pg.sh start|stop|restart DIR [name=value...]
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  command=${1:?usage: pg.sh start|stop|restart DIR [name=value...]}; shift
  case "$command" in
    start) pg_cluster_start "$@" ;;
    stop) pg_cluster_stop "$@" ;;
    restart) pg_cluster_restart "$@" ;;
    *) echo "pg.sh: unknown command $command (expected start, stop, restart)" >&2; exit 2 ;;
  esac
fi
