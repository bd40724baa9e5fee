#!/usr/bin/env bash
# Two laneway builds (or one) and HAProxy leastconn+httpclose+no-delay side by side on
# one workload over two simulated `h20-tp8` replicas (four API processes each, clock x4),
# in interleaved rounds: a quick before/after for balancing changes.
#
#   benches/sweep_ab.sh BIN_A [BIN_B [WORKLOAD [ROUNDS [JSON]]]]
#
# EXTRA_B: config lines appended to BIN_B's config (e.g. "[admission]\nmax_unanswered_per_replica = 4").
# POLICY_A, POLICY_B: each build's balancing policy (default least_queue).
# BENCH_ARGS: extra `laneway bench` arguments. The JSON keeps every request's record,
# including its replica and API process (`x-sim-api-worker`).
set -euo pipefail
BIN_A="${1:?}"; BIN_B="${2:-}"; WORKLOAD="${3:-c128_r256_t64}"; ROUNDS="${4:-2}"; OUTJ="${5:-/tmp/sweep_ab.json}"
W=$(mktemp -d /tmp/laneway-sweep-ab.XXXXXX)
PIDS=()
trap 'kill ${PIDS[@]} 2>/dev/null; wait 2>/dev/null' EXIT
url_of() { for i in $(seq 100); do u=$(grep -o 'http://127.0.0.1:[0-9]*' "$1" | head -1 || true); [ -n "$u" ] && { echo $u; return; }; sleep 0.1; done; echo "no url in $1" >&2; exit 1; }
for i in 0 1; do
  "$BIN_A" sim --port 0 --profile h20-tp8 --api-workers 4 --speed 4 --id r$i --seed $((i+1)) --no-enable-prefix-caching > $W/sim$i.out 2>$W/sim$i.err & PIDS+=($!)
done
S0=$(url_of $W/sim0.out); S1=$(url_of $W/sim1.out)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
gw() { # name bin port policy
  cat > $W/$1.toml <<T
listen = "127.0.0.1:$3"
admin_listen = "127.0.0.1:$(free_port)"
policy = "$4"
[entries.short]
strategy = "force_close"
[[replicas]]
name = "r0"
url = "$S0"
[[replicas]]
name = "r1"
url = "$S1"
T
  [ "$1" = b ] && printf '%b\n' "${EXTRA_B:-}" >> $W/$1.toml
  "$2" serve --config $W/$1.toml > $W/$1.out 2>$W/$1.err & PIDS+=($!)
}
PA=$(free_port); PB=$(free_port); PH=$(free_port)
gw a "$BIN_A" $PA "${POLICY_A:-least_queue}"
TARGETS=(--target "lw-a=http://127.0.0.1:$PA")
if [ -n "$BIN_B" ]; then gw b "$BIN_B" $PB "${POLICY_B:-least_queue}"; TARGETS+=(--target "lw-b=http://127.0.0.1:$PB"); fi
cat > $W/haproxy.cfg <<T
global
    nbthread 1
    maxconn 9000
defaults
    mode http
    timeout connect 5s
    timeout client 900s
    timeout server 900s
    maxconn 9000
frontend entry
    bind 127.0.0.1:$PH
    default_backend fleet
backend fleet
    balance leastconn
    option httpclose
    option http-no-delay
    server r0 ${S0#http://}
    server r1 ${S1#http://}
T
haproxy -f $W/haproxy.cfg > $W/haproxy.out 2>&1 & PIDS+=($!)
TARGETS+=(--target "haproxy=http://127.0.0.1:$PH")
for p in $PA $PB $PH; do for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$p/ && break; sleep 0.1; done; done
"$BIN_A" bench "${TARGETS[@]}" --workload "$WORKLOAD" --rounds "$ROUNDS" --seed 3 --quiet --json "$OUTJ" ${BENCH_ARGS:-}
