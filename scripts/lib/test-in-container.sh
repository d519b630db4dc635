# Run by scripts/test-trixie inside its Debian 13 container (work tree at its own path, /opt/swift read-only):
#   bash scripts/lib/test-in-container.sh BUNDLE FILTER...
# Starts the tests' PostgreSQL (the container's 17) and PgBouncer (scripts/lib/test-db.sh), runs the test bundle
# once per filter, one test at a time, and prints PASS/FAIL per filter and a closing count.
# KNOWN below: tests known to fail on Debian 13's libraries, each with what fails and why. They are reported
# (KNOWN FAIL) and do not fail the run; any other failing test does. One that passes again is reported so that
# it is taken off the list.
set -uo pipefail
bundle=$1; shift
export LD_LIBRARY_PATH=/opt/swift/usr/lib/swift/linux   # the Swift runtime, not installed in the container
export NO_COLOR=1
KNOWN=(
)
known_reason() { local k; for k in "${KNOWN[@]}"; do [[ "${k%%|*}" == "$1" ]] && { echo "${k#*|}"; return 0; }; done; return 1; }

source scripts/lib/test-db.sh
TEST_DB_WHO=test-trixie
trap test_db_stop EXIT INT TERM
test_db_start
echo "test-trixie: $(. /etc/os-release; echo "$PRETTY_NAME") $(cat /etc/debian_version); $(pgbouncer --version | head -1)"
echo "test-trixie: curl CLI: $(curl --version | head -1)"
passed=0 failed=0 known=0 summary=() notes=()
for filter in "$@"; do
  out="$(mktemp)"
  t0=$SECONDS
  "$bundle" --testing-library swift-testing --no-parallel --filter "$filter" 2>&1 | tee "$out"
  status=${PIPESTATUS[0]}
  sed -i 's/\x1b\[[0-9;]*m//g' "$out"
  closing="$(grep -E 'Test run with [0-9]+ tests? .* (passed|failed)' "$out" | tail -1 | sed 's/^[^A-Za-z]*//')"
  ran="$(grep -oE 'Test run with [0-9]+ test' "$out" | tail -1 | grep -oE '[0-9]+' || echo 0)"
  # The tests that failed: "✘ Test name(…) … failed after …" (a parameterized one: "with N test cases failed").
  mapfile -t failing < <(grep -E '^[^ ]+ Test [A-Za-z0-9_]+\(.*failed after' "$out" | sed -E 's/^[^ ]+ Test ([A-Za-z0-9_]+)\(.*/\1/' | sort -u)
  unexpected=()
  for t in "${failing[@]}"; do
    if reason="$(known_reason "$t")"; then notes+=("KNOWN FAIL  $filter: $t — $reason"); known=$((known + 1))
    else unexpected+=("$t"); fi
  done
  for k in "${KNOWN[@]}"; do
    name="${k%%|*}"
    if grep -qE "^[^ ]+ Test $name\(.*passed after" "$out"; then notes+=("NOW PASSES  $filter: $name — take it off KNOWN in scripts/lib/test-in-container.sh"); fi
  done
  if [[ "${ran:-0}" -eq 0 ]]; then
    failed=$((failed + 1)); summary+=("FAIL  $filter ($((SECONDS - t0)) s, exit $status): no test ran")
  elif [[ $status -eq 0 ]]; then
    passed=$((passed + 1)); summary+=("PASS  $filter ($((SECONDS - t0)) s): $closing")
  elif ((${#unexpected[@]} == 0 && ${#failing[@]} > 0)); then
    passed=$((passed + 1)); summary+=("PASS  $filter ($((SECONDS - t0)) s) but for ${#failing[@]} known failure(s): $closing")
  else
    failed=$((failed + 1)); summary+=("FAIL  $filter ($((SECONDS - t0)) s, exit $status): ${unexpected[*]:-?} — $closing")
  fi
  rm -f "$out"
done
echo
printf '%s\n' "${summary[@]}" "${notes[@]}"
echo "trixie suites: $passed passed, $failed failed ($known known failing tests listed above)"
((failed == 0))
