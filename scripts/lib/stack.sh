# Shared helpers for scripts/demo, scripts/faults and bench/run: a throwaway PostgreSQL,
# a throwaway PKI, the FCM emulator, and the worker, all on loopback. Source it; call stack_init first.
# Everything lives under $STACK (a temp dir) and is torn down by stack_cleanup (trap it).

source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"
source "$(dirname "${BASH_SOURCE[0]}")/pg.sh"

stack_init() {
  mw_ensure_packages
  STACK="$(mktemp -d /tmp/mw-stack.XXXXXX)"
  chmod 755 "$STACK"
  pg_find_bindir
  BUILD_CONFIG="${BUILD_CONFIG:-release}"
  # BUILD_FLAGS: more `swift build` flags (bench/run builds the worker as scripts/package ships it).
  BIN="$(swift build -c "$BUILD_CONFIG" ${BUILD_FLAGS:-} --scratch-path "${SCRATCH_PATH:-.build}" --show-bin-path)"
  PIDS=()
}

stack_build() {
  echo "building ($BUILD_CONFIG)..." >&2
  swift build -c "$BUILD_CONFIG" ${BUILD_FLAGS:-} --scratch-path "${SCRATCH_PATH:-.build}" --product medication-worker >&2
  swift build -c "$BUILD_CONFIG" ${BUILD_FLAGS:-} --scratch-path "${SCRATCH_PATH:-.build}" --product fcm-emulator >&2
}

# stack_build_outbox_bench: the benchmarks' SQL tool (pgbench scripts from the pipeline's statements), never shipped.
stack_build_outbox_bench() {
  swift build -c "$BUILD_CONFIG" ${BUILD_FLAGS:-} --scratch-path "${SCRATCH_PATH:-.build}" --product outbox-bench >&2
}

# stack_start_pg [name=value settings...]: unix socket only, in $STACK/pg.
stack_start_pg() {
  pg_cluster_start "$STACK/pg" max_connections=200 "$@"
  PGCONN="host=$STACK/pg user=postgres dbname=postgres"
  export DATABASE_URL="$PGCONN"
}

stack_restart_pg() {
  pg_cluster_restart "$STACK/pg"
}

psqlc() { psql "$PGCONN" -v ON_ERROR_STOP=1 -qAtX "$@"; }

# A CA, a server certificate for 127.0.0.1, and the service account's RSA key.
stack_make_pki() {
  local d="$STACK/pki"
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" -days 2 -subj "/CN=mw test CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/server.key" -out "$d/server.csr" -subj "/CN=localhost" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -out "$d/server.pem" \
    -days 2 -extfile "$d/server.ext" 2>/dev/null
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$d/sa.key" 2>/dev/null
  openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  chmod 644 "$d"/*
}

# stack_start_emulator [extra flags]: sets EMULATOR_URL.
stack_start_emulator() {
  "$BIN/fcm-emulator" --public-key "$STACK/pki/sa.pub" --cert "$STACK/pki/server.pem" --key "$STACK/pki/server.key" "$@" \
    > "$STACK/emulator.out" 2>&1 &
  EMULATOR_PID=$!
  PIDS+=("$EMULATOR_PID")
  for _ in $(seq 100); do grep -q "listening on" "$STACK/emulator.out" 2>/dev/null && break; sleep 0.05; done
  EMULATOR_URL="$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$STACK/emulator.out")"
  [[ -n "$EMULATOR_URL" ]] || { cat "$STACK/emulator.out"; return 1; }
  stack_service_account "$EMULATOR_URL/token"
}

# stack_service_account TOKEN_URI: writes $STACK/sa.json.
stack_service_account() {
  python3 - "$STACK/pki/sa.key" "$1" > "$STACK/sa.json" <<'PY'
import json, sys
print(json.dumps({"type": "service_account", "project_id": "demo-project", "private_key_id": "k1",
                  "private_key": open(sys.argv[1]).read(), "client_email": "worker@demo-project.iam.gserviceaccount.com",
                  "token_uri": sys.argv[2]}))
PY
}

stack_schema() {
  psqlc -f sql/dev-api-schema.sql >/dev/null
  "$BIN/medication-worker" migrate >/dev/null
}

# stack_seed PATIENTS DEVICES_PER_CAREGIVER [TOKEN_PREFIX]: one ACTIVE caregiver per patient.
stack_seed() {
  local patients=$1 devices=$2 prefix=${3:-tok}
  psqlc <<SQL
INSERT INTO "Patient" (id, "displayName") SELECT 'p' || g, '患者' || g FROM generate_series(1, $patients) g;
INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status)
  SELECT 'l' || g, 'c' || g, 'p' || g, 'ACTIVE' FROM generate_series(1, $patients) g;
INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, "isEnabled", "lastSeenAt")
  SELECT 'd' || g || '-' || k, 'CAREGIVER', 'c' || g, '$prefix-' || g || '-' || k || '-' || md5(g::text || k::text), true, now() - interval '1 day'
  FROM generate_series(1, $patients) g, generate_series(1, $devices) k;
SQL
}

# comm_ticks NAME: CPU ticks of every process named NAME, reaped children included (PostgreSQL's short-lived backends
# count too). A process that exits while /proc is read is skipped (its CPU is in its parent's reaped-children time from
# then on); read only once the processes a phase started are gone (pg_backends_settled), or one may count 0 or 2 times.
comm_ticks() { { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v comm="($1)" '$2 == comm {sum += $14 + $15 + $16 + $17} END {print sum + 0}'; }
# pg_clusters_running: how many PostgreSQL postmasters run on this machine (postgres processes whose parent is not
# one). comm_ticks counts them all, so a PostgreSQL figure read while another cluster (a test suite's) started or
# stopped is void: bench/run warns.
pg_clusters_running() {
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk '$2 == "(postgres)" {pg[$1] = $4} END {n = 0; for (p in pg) if (!(pg[p] in pg)) n++; print n}'
}
# comm_pids NAME: the PIDs of the processes named NAME, one per line.
comm_pids() { { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v comm="($1)" '$2 == comm {print $1}'; }
# pg_backends_settled BEFORE: after a client such as pgbench disconnects, waits (at most 5 s) until every postgres
# process that is not in BEFORE (comm_pids' list from before the client started) has exited and been reaped;
# autovacuum workers are not waited for. /proc is read in name order, not PID order, so a backend reaped while
# comm_ticks reads it is either missed (its parent read before the reaping) or counted twice (read after it): one
# bench/machine-limit run read PostgreSQL's cost at half its value, 54 us against 108-127 in the same hour.
pg_backends_settled() {
  local before=$1 pid pending
  for _ in $(seq 100); do
    pending=0
    for pid in $(comm_pids postgres); do
      grep -qx "$pid" <<<"$before" && continue
      grep -q autovacuum "/proc/$pid/cmdline" 2>/dev/null && continue
      pending=1
      break
    done
    ((pending)) || return 0
    sleep 0.05
  done
  echo "pg_backends_settled: postgres processes still running 5 s after the client ended; CPU may be miscounted" >&2
}

# stack_enqueue COUNT PATIENTS [GROUP_PREFIX]: COUNT events spread over the patients, each with its own group.
stack_enqueue() {
  local count=$1 patients=$2 group=${3:-grp}
  psqlc -c "INSERT INTO \"PushOutbox\" (\"eventType\", \"patientId\", payload)
    SELECT 'DOSE_TAKEN', 'p' || (1 + (g % $patients)), jsonb_build_object('date', '2026-02-11', 'slot', 'morning',
      'recordingGroupId', '$group-' || g, 'withinTime', true, 'isPrn', false, 'takenAt', '2026-02-11T08:03:27+09:00')
    FROM generate_series(1, $count) g" >/dev/null
}

# Worker environment pointing at the emulator.
stack_worker_env() {
  export FCM_SERVICE_ACCOUNT_FILE="$STACK/sa.json" FCM_BASE_URL="$EMULATOR_URL" TLS_CA_FILE="$STACK/pki/ca.pem"
  export HEALTH_ADDR="${HEALTH_ADDR:-127.0.0.1:0}" LOG_LEVEL="${LOG_LEVEL:-notice}"
}

# stack_start_worker NAME [env assignments...]: runs `medication-worker run` in the background; sets WORKER_PID.
stack_start_worker() {
  local name=$1; shift
  env "$@" "${WORKER_BIN:-$BIN/medication-worker}" run > "$STACK/$name.log" 2>&1 &
  WORKER_PID=$!
  PIDS+=("$WORKER_PID")
}

# stack_health_port PID: the port the worker with that PID listens on (its health endpoint), empty until it listens.
stack_health_port() {
  ss -ltnpH 2>/dev/null | awk -v p="pid=$1," '$0 ~ p {split($4, a, ":"); print a[length(a)]; exit}'
}

# stack_wait_ready PID: waits until the worker with that PID serves /readyz with 200.
stack_wait_ready() {
  local pid=$1
  for _ in $(seq 300); do
    local port
    port=$(stack_health_port "$pid")
    if [[ -n "$port" ]] && curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "worker $pid did not become ready" >&2
  return 1
}

# stack_wait_until SECONDS SQL: polls until the SQL prints "t".
stack_wait_until() {
  local deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    [[ "$(psqlc -c "$2" 2>/dev/null)" == "t" ]] && return 0
    sleep 0.2
  done
  return 1
}

# stack_wait_drained SECONDS: polls until no outbox event is PENDING, every 50 ms, through one psql session (each
# question its own transaction, read from the claim's partial index). The benchmark's drains wait with it: a psql
# process and a backend every 0.2 s, each counting the outbox, took about 3% of the machine from the drain it measured.
stack_wait_drained() {
  local deadline=$((SECONDS + $1)) answer=""
  coproc DRAIN_WAITER { psql "$PGCONN" -qAtX 2>/dev/null; }
  local to=${DRAIN_WAITER[1]} from=${DRAIN_WAITER[0]} pid=$DRAIN_WAITER_PID
  while ((SECONDS < deadline)); do
    echo "SELECT NOT EXISTS (SELECT FROM \"PushOutbox\" WHERE status = 'PENDING');" >&"$to"
    read -r answer <&"$from" || break
    [[ "$answer" == t ]] && break
    read -r -t 0.05 -u "$from" _ || true  # nothing comes: a 50 ms pause without a process
  done
  exec {to}>&-
  wait "$pid" 2>/dev/null
  [[ "$answer" == t ]]
}

stack_cleanup() {
  set +e
  for pid in "${PIDS[@]:-}"; do [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  # Anything started from this stack's directory (nginx workers, a stray worker) goes too.
  [[ -n "${STACK:-}" ]] && pkill -f "$STACK" 2>/dev/null
  [[ -n "${STACK:-}" ]] && pg_cluster_stop "$STACK/pg"
  [[ -n "${KEEP_STACK:-}" ]] || rm -rf "$STACK"
}
