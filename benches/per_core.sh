#!/usr/bin/env bash
# Requests per core on the proxy path: laneway against HAProxy, side by side in one run.
#
#   benches/per_core.sh [LANEWAY_BINARY] [SECONDS_PER_TARGET] [ROUNDS] [BASELINE_BINARY]
#
# An nginx stub (benches/per_core/nginx.conf: one worker, a fixed small chat completion)
# stands in for the replicas, so the proxy is what runs out of CPU. Every proxy is pinned to
# core 1 and only one is driven at a time; the stub and wrk (one thread, $PER_CORE_CONNECTIONS
# connections, default 32, benches/per_core/post.lua: a tiny non-streaming chat request)
# share core 0. Targets: the stub direct; HAProxy (nbthread 1, leastconn) with keep-alive and
# with httpclose; laneway with the short entry as `spread` and as `force_close` (the
# default). Rounds interleave the targets (A B C ... A B C ...). Reported per target: req/s,
# wrk's latency p50/p99, and the proxy's CPU (user + system) per request; then laneway's
# ratios to the HAProxy mode it is measured against (spread ~ keep-alive, force_close ~
# httpclose), with the CPU split into user and system (kernel) time. PER_CORE_WORKLOAD=sse sends streamed completions instead, which the stub
# answers with $PER_CORE_SSE_EVENTS (default 64) token events, a usage event and [DONE]
# in one body: the cost per relayed and observed event. With BASELINE_BINARY, that build runs too (targets `baseline-spread`,
# `baseline-force-close`), for a before/after comparison in the same run. Output: a markdown report on stdout; raw wrk output in $PER_CORE_OUT
# (default /tmp/per-core). PER_CORE_POLICY (default least_queue) sets every laneway target's
# policy; PER_CORE_LANEWAY_CONFIG (TOML, printf %b escapes, tables only) is appended to the
# laneway-* targets' configuration and not to the baseline-* ones, so that BASELINE_BINARY set
# to the same binary measures what a configuration costs (e.g. [kv_events] and a tokenizer).
# Needs nginx, wrk and haproxy: scripts/install-bench-deps.sh installs them.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LANEWAY="${1:-$ROOT/target/release/laneway}"
SECONDS_PER_TARGET="${2:-6}"
ROUNDS="${3:-2}"
BASELINE="${4:-}"
CONNECTIONS="${PER_CORE_CONNECTIONS:-32}"
WORKLOAD="${PER_CORE_WORKLOAD:-tiny}"
SSE_EVENTS="${PER_CORE_SSE_EVENTS:-64}"
case "$WORKLOAD" in
    tiny) SCRIPT=post.lua PATH_SENT=/v1/chat/completions; EVENTS=0 ;;
    sse) SCRIPT=post_stream.lua PATH_SENT=/v1/completions; EVENTS="$SSE_EVENTS" ;;
    *) echo "PER_CORE_WORKLOAD is tiny or sse" >&2; exit 1 ;;
esac
OUT="${PER_CORE_OUT:-/tmp/per-core}"
WORK="$(mktemp -d /tmp/per-core.XXXXXX)"
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
for tool in nginx wrk haproxy; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/install-bench-deps.sh" >&2; exit 1; }
done

source "$ROOT/benches/peers/background.sh"
source "$ROOT/benches/peers/listening.sh"
source "$ROOT/benches/per_core/stub.sh"

start_stub taskset -c 0

declare -A URLS=() PROXY_PIDS=()
NAMES=(direct)
URLS[direct]="$STUB"

# start_haproxy NAME CONNECTION_OPTION
start_haproxy() {
    local name="$1" option="$2" port
    port="$(free_port)"
    sed -e "s|@PORT@|$port|" -e "s|@BALANCE@|leastconn|" -e "s|@CONNECTION@|$option|" \
        -e "s|@NODELAY@|# no http-no-delay: tiny bodies|" \
        -e "s|@SERVERS@|    server stub 127.0.0.1:$STUB_PORT|" \
        "$ROOT/benches/peers/haproxy.cfg" >"$WORK/$name.cfg"
    taskset -c 1 haproxy -f "$WORK/$name.cfg" >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    PROXY_PIDS[$name]=$!
    URLS[$name]="http://127.0.0.1:$port"
    NAMES+=("$name")
}

# start_laneway NAME STRATEGY [BINARY]
start_laneway() {
    local name="$1" strategy="$2" binary="${3:-$LANEWAY}"
    laneway_config "$WORK/$name.toml" "$strategy"
    sed -i "s|^policy = .*|policy = \"${PER_CORE_POLICY:-least_queue}\"|" "$WORK/$name.toml"
    if [[ "$name" == laneway-* && -n "${PER_CORE_LANEWAY_CONFIG:-}" ]]; then
        printf '%b\n' "$PER_CORE_LANEWAY_CONFIG" >>"$WORK/$name.toml"
    fi
    taskset -c 1 "$binary" serve --config "$WORK/$name.toml" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=($!)
    PROXY_PIDS[$name]=$!
    URLS[$name]="$(listening_url "$WORK/$name.out")"
    NAMES+=("$name")
}

start_haproxy haproxy-keepalive "option http-keep-alive"
start_haproxy haproxy-httpclose "option httpclose"
start_laneway laneway-spread spread
start_laneway laneway-force-close force_close
if [[ -n "$BASELINE" ]]; then
    start_laneway baseline-spread spread "$BASELINE"
    start_laneway baseline-force-close force_close "$BASELINE"
fi

# Every target answers before the first round.
for name in "${NAMES[@]}"; do
    for ((tries = 0; tries < 50; tries++)); do
        curl -sf -o /dev/null -H 'content-type: application/json' \
            -d '{"model":"stub","messages":[{"role":"user","content":"hi"}],"prompt":"hi"}' \
            "${URLS[$name]}$PATH_SENT" && break
        sleep 0.2
    done
done

# user and system clock ticks of a process
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }

for ((round = 1; round <= ROUNDS; round++)); do
    for name in "${NAMES[@]}"; do
        pid="${PROXY_PIDS[$name]:-}"
        before="0 0"; [[ -n "$pid" ]] && before="$(ticks "$pid")"
        taskset -c 0 wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_TARGET}s" --latency \
            -s "$ROOT/benches/per_core/$SCRIPT" "${URLS[$name]}$PATH_SENT" \
            >"$OUT/$name-r$round.txt"
        after="0 0"; [[ -n "$pid" ]] && after="$(ticks "$pid")"
        read -r user_before system_before <<<"$before"
        read -r user_after system_after <<<"$after"
        echo "$name $round $((user_after - user_before)) $((system_after - system_before))" \
            >>"$OUT/cpu-ticks.txt.$$"
    done
done
mv "$OUT/cpu-ticks.txt.$$" "$OUT/cpu-ticks.txt"

python3 "$ROOT/benches/per_core/report.py" "$OUT" "$(getconf CLK_TCK)" "$CONNECTIONS" "$SECONDS_PER_TARGET" "$ROUNDS" "$EVENTS"
