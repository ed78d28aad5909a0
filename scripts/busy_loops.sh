# Sourced by the stress scripts: busy loops beside the tests (a machine doing something else),
# killed on every way out of the sourcing script (end, failure, Ctrl-C).
#   start_busy_loops N LOGS    # LOGS: named when the run is interrupted

busy_pids=()

stop_busy_loops() {
    local pid
    for pid in "${busy_pids[@]}"; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    busy_pids=()
}

start_busy_loops() {
    local count="$1" logs="$2" i
    trap stop_busy_loops EXIT
    # shellcheck disable=SC2064  # the folder is named now, while it is known
    trap "echo; echo 'interrupted (logs: $logs)'; exit 130" INT TERM
    for ((i = 0; i < count; i++)); do
        ( while :; do :; done ) &
        busy_pids+=("$!")
    done
}
