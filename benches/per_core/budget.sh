#!/usr/bin/env bash
# laneway's per-request budget: user-space instructions per tiny request on the proxy path,
# in total and per step, counted by valgrind's callgrind (instruction counts do not depend
# on what else the machine runs, unlike times; the kernel's share is not counted: see
# benches/per_core.sh for CPU time against HAProxy).
#
#   benches/per_core/budget.sh [LANEWAY_BINARY] [STRATEGY] [REQUESTS]
#
# The gateway (short entry as STRATEGY, default spread) runs under callgrind in front of the
# nginx stub of per_core.sh; 400 requests warm it up, the counters are zeroed, REQUESTS
# (default 2000) tiny chat requests go over 4 keep-alive connections, and the counters are
# dumped. The steps are named in budget.py; callgrind_annotate's whole inclusive listing is
# kept in $BUDGET_OUT (default /tmp/per-core-budget-STRATEGY.txt), the raw profile beside it
# (.callgrind, for callgrind_annotate --tree=caller). BUDGET_WORKLOAD=sse sends streamed
# completions instead (the stub's 64 token events, a usage event and [DONE] each): the
# total per request over 66 is the cost per relayed and observed event, the request's
# share included. Needs valgrind and nginx. The total
# holds for any build; with the release profile's fat LTO some steps are inlined into their
# callers and read "not seen": build with CARGO_PROFILE_RELEASE_LTO=false
# CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 (into its own CARGO_TARGET_DIR) to attribute them.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
LANEWAY="${1:-$ROOT/target/release/laneway}"
STRATEGY="${2:-spread}"
REQUESTS="${3:-2000}"
WORK="$(mktemp -d /tmp/per-core-budget.XXXXXX)"
for tool in nginx valgrind callgrind_control callgrind_annotate; do
    command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 1; }
done

source "$ROOT/benches/peers/background.sh"
source "$ROOT/benches/peers/listening.sh"
source "$ROOT/benches/per_core/stub.sh"

start_stub
laneway_config "$WORK/laneway.toml" "$STRATEGY"
# No scrape or health check during the count: their instructions depend on how long the
# requests take under valgrind, not on how many there are.
printf '[scrape]\ninterval_ms = 600000\n[health]\ninterval_ms = 600000\n' >>"$WORK/laneway.toml"
valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out" \
    "$LANEWAY" serve --config "$WORK/laneway.toml" >"$WORK/laneway.out" 2>"$WORK/valgrind.err" &
PIDS+=($!)
VALGRIND_PID=$!
URL="$(listening_url "$WORK/laneway.out")"
PORT="${URL##*:}"

WORKLOAD="${BUDGET_WORKLOAD:-tiny}"
python3 "$ROOT/benches/per_core/load.py" 127.0.0.1 "$PORT" 400 4 "$WORKLOAD"
callgrind_control -z "$VALGRIND_PID" >/dev/null
python3 "$ROOT/benches/per_core/load.py" 127.0.0.1 "$PORT" "$REQUESTS" 4 "$WORKLOAD"
callgrind_control -d "$VALGRIND_PID" >/dev/null
# The dump is written asynchronously: wait (at most 30 s) for a complete file.
for ((tries = 0; tries < 150; tries++)); do
    dump="$(ls "$WORK"/callgrind.out.* 2>/dev/null | head -n1 || true)"
    [[ -n "$dump" ]] && grep -q '^totals:' "$dump" 2>/dev/null && break
    sleep 0.2
done
KEPT="${BUDGET_OUT:-/tmp/per-core-budget-$STRATEGY.txt}"
cp "$dump" "$KEPT.callgrind"
callgrind_annotate --inclusive=yes --threshold=100 "$dump" >"$KEPT"
python3 "$ROOT/benches/per_core/budget.py" "$KEPT" "$REQUESTS" "$STRATEGY"
