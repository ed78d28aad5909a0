#!/usr/bin/env bash
# Run some tests again and again under CPU pressure: two busy loops run beside pytest, so timing
# windows that an idle machine hides (a shutdown that waits without a bound, a cancellation that
# lands as a wake-up fires, two timers whose order the load decides) show up as failures.
# scripts/stress_suite.sh does the same for the whole CI check on fresh clones.
#
#   scripts/stress_tests.sh                  # the device plugin's tests, 10 runs
#   scripts/stress_tests.sh 30               # 30 runs
#   scripts/stress_tests.sh 5 services/scheduler/tests/service_bind/test_service_lock_waits.py
#   STRESS_BUSY_LOOPS=4 scripts/stress_tests.sh
#
# Prints one line per run and a summary; the output of every failed run is kept (its path is
# printed).  Exit status: 0 when every run passed, 1 when any failed, 2 for bad usage.  The busy
# loops are started here and killed on every way out (end, failure, Ctrl-C).
set -uo pipefail

runs="${1:-10}"
busy_loops="${STRESS_BUSY_LOOPS:-2}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]] || ! [[ "$busy_loops" =~ ^[0-9]+$ ]]; then
    echo "usage: $0 [RUNS [PYTEST_PATH...]]   (RUNS and STRESS_BUSY_LOOPS are whole numbers, RUNS >= 1)" >&2
    exit 2
fi

cd "$(dirname "$0")/.." || exit 2
pytest=".venv/bin/pytest"
if [[ ! -x "$pytest" ]]; then
    echo "$pytest not found: create the environment first (uv sync)" >&2
    exit 2
fi
tests=("${@:2}")
if ((${#tests[@]} == 0)); then
    tests=(services/deviceplugin)
fi
logs="$(mktemp -d "${TMPDIR:-/tmp}/stress-tests.XXXXXX")"

# shellcheck source=busy_loops.sh
source scripts/busy_loops.sh  # from the repository root (cd above)
start_busy_loops "$busy_loops" "$logs"
echo "stress: ${tests[*]} x $runs runs beside $busy_loops busy loops (logs: $logs)"

failed=0
total_started=$SECONDS
for ((run = 1; run <= runs; run++)); do
    log="$logs/run-$run.log"
    started=$SECONDS
    if "$pytest" -q -p no:cacheprovider "${tests[@]}" </dev/null >"$log" 2>&1; then
        echo "run $run/$runs: ok, $((SECONDS - started))s: $(tail -n 1 "$log")"
        rm -f "$log"
    else
        failed=$((failed + 1))
        echo "run $run/$runs: FAILED, $((SECONDS - started))s: $(tail -n 1 "$log") (output: $log)"
        grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /'
    fi
done

stop_busy_loops
echo "summary: $((runs - failed))/$runs runs passed, $failed failed, $((SECONDS - total_started))s"
if ((failed > 0)); then
    exit 1
fi
rmdir "$logs" 2>/dev/null
exit 0
