# Run by scripts/test-trixie inside its Debian 13 container (work tree at its own path, /opt/swift read-only):
#   bash scripts/lib/test-in-container.sh BUNDLE FILTER...
# Starts the tests' PostgreSQL (the container's 17) and PgBouncer (scripts/lib/test-db.sh), runs the test bundle
# once per filter, one test at a time as scripts/test does, and prints PASS/FAIL per filter and a closing count.
set -uo pipefail
bundle=$1; shift
export LD_LIBRARY_PATH=/opt/swift/usr/lib/swift/linux   # the Swift runtime, not installed in the container
source scripts/lib/test-db.sh
TEST_DB_WHO=test-trixie
trap test_db_stop EXIT INT TERM
test_db_start
echo "test-trixie: $(. /etc/os-release; echo "$PRETTY_NAME") $(cat /etc/debian_version); curl CLI: $(curl --version | head -1)"
passed=0 failed=0 summary=()
for filter in "$@"; do
  out="$(mktemp)"
  t0=$SECONDS
  "$bundle" --testing-library swift-testing --no-parallel --filter "$filter" 2>&1 | tee "$out"
  status=${PIPESTATUS[0]}
  closing="$(grep -E 'Test run with [0-9]+ tests? .* (passed|failed)' "$out" | tail -1 | sed 's/^[^A-Za-z]*//')"
  ran="$(grep -oE 'Test run with [0-9]+ test' "$out" | tail -1 | grep -oE '[0-9]+' || echo 0)"
  if [[ $status -eq 0 && "${ran:-0}" -gt 0 ]]; then
    passed=$((passed + 1)); summary+=("PASS  $filter ($((SECONDS - t0)) s): $closing")
  else
    failed=$((failed + 1)); summary+=("FAIL  $filter ($((SECONDS - t0)) s, exit $status): ${closing:-no test ran}")
  fi
  rm -f "$out"
done
echo
printf '%s\n' "${summary[@]}"
echo "test-trixie suites: $passed passed, $failed failed"
((failed == 0))
