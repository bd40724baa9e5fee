# Background processes of a bench script (sourced after $WORK is set): add each one's PID
# to PIDS; on exit every one is stopped and $WORK removed.
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]:-}"; do [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]:-}"; do [[ -n "$pid" ]] && wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
