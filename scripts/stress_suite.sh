#!/usr/bin/env bash
# The whole CI check (`bash .ci/run`, which is `make test` with CI's profile) on N fresh clones of
# HEAD, one after the other, with busy loops beside it: a new user's clone on a 2-core machine that
# is doing something else. Timing windows that an idle machine hides show up as failures here.
#
#   scripts/stress_suite.sh               # 5 clones, 2 busy loops
#   scripts/stress_suite.sh 3             # 3 clones
#   STRESS_BUSY_LOOPS=0 scripts/stress_suite.sh 1     # one clean run (CI's time, unloaded)
#   STRESS_REF=<commit> scripts/stress_suite.sh 2     # another commit than HEAD
#   STRESS_KEEP=1 ...                     # keep the clones (default: removed after a passing run)
#
# Each clone gets its own .venv (uv's cache makes that quick) and runs from a clean tree, exactly
# as CI does: CI=true, no standard input. Prints one line per run (wall time, pytest's closing
# line), then every failing test id seen over all runs with the run it failed in; the full output
# of every run is kept in the log folder (its path is printed). Exit status: 0 when every run
# passed, 1 when any failed, 2 for bad usage. The busy loops are started here and killed on every
# way out (end, failure, Ctrl-C).
set -uo pipefail

runs="${1:-5}"
busy_loops="${STRESS_BUSY_LOOPS:-2}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]] || ! [[ "$busy_loops" =~ ^[0-9]+$ ]]; then
    echo "usage: $0 [RUNS]   (RUNS and STRESS_BUSY_LOOPS are whole numbers, RUNS >= 1)" >&2
    exit 2
fi

repo="$(cd "$(dirname "$0")/.." && pwd)" || exit 2
ref="$(git -C "$repo" rev-parse "${STRESS_REF:-HEAD}")" || {
    echo "not a commit: ${STRESS_REF:-HEAD}" >&2
    exit 2
}
work="$(mktemp -d "${TMPDIR:-/tmp}/stress-suite.XXXXXX")"
logs="$work/logs"
mkdir -p "$logs"

# shellcheck source=busy_loops.sh
source "$repo/scripts/busy_loops.sh"
start_busy_loops "$busy_loops" "$logs"
echo "stress: bash .ci/run on $runs fresh clones of ${ref:0:12} beside $busy_loops busy loops (logs: $logs)"

failed=0
total_started=$SECONDS
for ((run = 1; run <= runs; run++)); do
    clone="$work/clone-$run"
    log="$logs/run-$run.log"
    started=$SECONDS
    if ! git clone --quiet --no-hardlinks "$repo" "$clone" >"$log" 2>&1 \
        || ! git -C "$clone" checkout --quiet --detach "$ref" >>"$log" 2>&1; then
        echo "run $run/$runs: could not clone (output: $log)"
        failed=$((failed + 1))
        continue
    fi
    # CI lays a copy of shared/ beside the clone; the suite must not need it, but give it the
    # same neighbourhood when there is one.
    if [[ -d "$repo/../shared" && ! -e "$work/shared" ]]; then
        ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"
    fi
    (cd "$clone" && CI=true bash .ci/run </dev/null) >>"$log" 2>&1
    status=$?
    closing="$(grep -E '^=+ .*(passed|failed|error).* =+$' "$log" | tail -n 1)"
    if ((status == 0)); then
        echo "run $run/$runs: ok, $((SECONDS - started))s: ${closing:-no pytest closing line}"
        [[ -n "${STRESS_KEEP:-}" ]] || rm -rf "$clone"
    else
        failed=$((failed + 1))
        echo "run $run/$runs: FAILED (exit $status), $((SECONDS - started))s: ${closing:-$(tail -n 1 "$log")} (output: $log)"
    fi
done

stop_busy_loops
echo "summary: $((runs - failed))/$runs runs passed, $failed failed, $((SECONDS - total_started))s"
if ((failed > 0)); then
    echo "failing tests (run: id):"
    for log in "$logs"/run-*.log; do
        run="${log##*/run-}"
        run="${run%.log}"
        grep -E '^(FAILED|ERROR) ' "$log" | sed "s/^/  $run: /"
    done
    exit 1
fi
exit 0
