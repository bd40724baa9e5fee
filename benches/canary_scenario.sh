#!/usr/bin/env bash
# The canary scenario operators start from: `config/canary-tp8x2.toml` (force_close against
# keep_alive on the short entry, 50/50 over one TP8x2 pool) in front of two simulated
# `h20-tp8` replicas with 4 API workers at clock speed 4, loaded with 1000/300 at 12
# concurrent clients, then the canary report as an operator reads it.
#
#   benches/canary_scenario.sh [REQUESTS [SEED]]     (default 240 requests, seed 1)
#
# Prints the bench summary and `/admin/canary?format=text`; about a minute after the build.
# LANEWAY=path picks the binary (default target/release/laneway, built if missing).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${1:-240}"
SEED="${2:-1}"
LANEWAY="${LANEWAY:-$ROOT/target/release/laneway}"
WORK="$(mktemp -d /tmp/laneway-canary.XXXXXX)"
source "$ROOT/benches/peers/background.sh"
source "$ROOT/benches/peers/listening.sh"

[[ -x "$LANEWAY" ]] || (cd "$ROOT" && cargo build --release --quiet --bin laneway)

for id in 0 1; do
    "$LANEWAY" sim --port 0 --profile h20-tp8 --api-workers 4 --speed 4 --id "sim-$id" \
        >"$WORK/sim-$id.out" 2>"$WORK/sim-$id.err" &
    PIDS+=($!)
done
SIM0="$(listening_url "$WORK/sim-0.out")"
SIM1="$(listening_url "$WORK/sim-1.out")"

# The shipped config, with the replicas' addresses and free ports for the gateway.
sed -e "s#http://127.0.0.1:8001#$SIM0#; s#http://127.0.0.1:8002#$SIM1#" \
    "$ROOT/config/canary-tp8x2.toml" >"$WORK/canary.toml"
export LANEWAY_ADMIN_TOKEN="canary-scenario"
"$LANEWAY" serve --config "$WORK/canary.toml" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
PIDS+=($!)
GATEWAY="$(listening_url "$WORK/gateway.out")"
ADMIN="$(grep -o 'admin (metrics, health) on http://[0-9.:]*' "$WORK/gateway.out" | grep -o 'http://.*')"

"$LANEWAY" bench --target "canary=$GATEWAY" --workload 1000/300/c12 --requests "$REQUESTS" \
    --seed "$SEED" --quiet --goodput ttft:1000 tpot:50
echo
curl -s -H "authorization: Bearer $LANEWAY_ADMIN_TOKEN" "$ADMIN/admin/canary?format=text"
