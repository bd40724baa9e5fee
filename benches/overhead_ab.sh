#!/usr/bin/env bash
# What two laneway builds add to tiny requests, side by side in one interleaved run.
#
#   benches/overhead_ab.sh BEFORE_BINARY AFTER_BINARY [SECONDS_PER_TARGET]
#
# Two simulated replicas (benches/peers/overhead-replica.toml) and the load generator share
# core 0; every gateway is pinned to core 1 (only one is driven at a time: the rounds
# interleave). Gateways: each binary with the short entry as `force_close` (the default)
# and as `spread` (16 kept connections per replica). Runs the overhead mode open loop at
# 5,000 req/s, then a saturation run over $AB_CONCURRENCY connections (default 32; the
# simulated replicas' ~1 ms timer floor caps direct access near 16,000 req/s at 32).
# Output: a table per run on stdout, JSON in $AB_OUT (default /tmp/overhead-ab).
# AB_REPLICA_HOST=localhost names the replicas to the gateways by that host name instead of
# 127.0.0.1 (direct access keeps the address), as a fleet named by DNS is.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BEFORE="$1"
AFTER="$2"
SECONDS_PER_TARGET="${3:-6}"
OUT="${AB_OUT:-/tmp/overhead-ab}"
WORK="$(mktemp -d /tmp/overhead-ab.XXXXXX)"
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

source "$ROOT/benches/peers/background.sh"

# listening_url FILE: the URL a `laneway sim` or `serve` prints first.
source "$ROOT/benches/peers/listening.sh"

for id in r0 r1; do
    taskset -c 0 "$AFTER" sim --port 0 --config "$ROOT/benches/peers/overhead-replica.toml" \
        --api-workers 4 --id "$id" >"$WORK/sim-$id.out" 2>"$WORK/sim-$id.err" &
    PIDS+=($!)
done
R0="$(listening_url "$WORK/sim-r0.out")"
R1="$(listening_url "$WORK/sim-r1.out")"

TARGETS=("direct=$R0,$R1")
declare -A GATEWAY_PIDS=()
# start_gateway NAME BINARY STRATEGY
start_gateway() {
    local name="$1" binary="$2" strategy="$3" config="$WORK/$1.toml"
    local host="${AB_REPLICA_HOST:-127.0.0.1}"
    sed -e "s|@LISTEN@|127.0.0.1:0|" -e "s|@ADMIN@|127.0.0.1:0|" \
        -e "s|@R0@|${R0/127.0.0.1/$host}|" -e "s|@R1@|${R1/127.0.0.1/$host}|" \
        "$ROOT/benches/peers/laneway-tp8x2.toml" >"$config"
    if [[ "$strategy" == spread ]]; then
        sed -i 's|^strategy = "force_close"|strategy = "spread"\nspread_connections = 16|' "$config"
    fi
    taskset -c 1 "$binary" serve --config "$config" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=($!)
    GATEWAY_PIDS[$name]=$!
    TARGETS+=("$name=$(listening_url "$WORK/$name.out")")
}
start_gateway before-spread "$BEFORE" spread
start_gateway after-spread "$AFTER" spread
start_gateway before-close "$BEFORE" force_close
start_gateway after-close "$AFTER" force_close
sleep 1

# user and system clock ticks of a process: "UTIME STIME"
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }

run() {
    local name="$1" gateway
    shift
    declare -A before=()
    for gateway in "${!GATEWAY_PIDS[@]}"; do before[$gateway]="$(ticks "${GATEWAY_PIDS[$gateway]}")"; done
    taskset -c 0 "$AFTER" bench "${TARGETS[@]/#/--target=}" --workload tiny --quiet \
        --rounds 2 --duration "$((SECONDS_PER_TARGET * 2))" --json "$OUT/$name.json" "$@"
    # CPU per successful request, user and system apart (the requests from the JSON).
    echo "| gateway | user us per ok request | system us per ok request |"
    echo "|---|---:|---:|"
    for gateway in $(printf '%s\n' "${!GATEWAY_PIDS[@]}" | sort); do
        read -r user_before sys_before <<<"${before[$gateway]}"
        read -r user_after sys_after <<<"$(ticks "${GATEWAY_PIDS[$gateway]}")"
        python3 - "$OUT/$name.json" "$gateway" "$((user_after - user_before))" "$((sys_after - sys_before))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
path, name, user, system, hz = sys.argv[1:]
ok = next(t["summary"]["successes"] for t in json.load(open(path))["targets"] if t["name"] == name)
scale = 1e6 / float(hz) / max(ok, 1)
print(f"| {name} | {int(user) * scale:.1f} | {int(system) * scale:.1f} |")
PY
    done
}
echo "## open loop, 5,000 req/s"
run open-5000 --rate 5000
CONCURRENCY="${AB_CONCURRENCY:-32}"
echo "## saturation, $CONCURRENCY connections"
run "saturation-c$CONCURRENCY" --max-concurrency "$CONCURRENCY"
