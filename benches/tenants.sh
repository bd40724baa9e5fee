#!/usr/bin/env bash
# Fairness between tenants and priority bands, measured through laneway's admission queue.
# One simulated h20-tp8 replica (clock speed 2, API_WORKERS API processes, default 4) behind a
# gateway that admits PER_REPLICA requests to it at once (default 4); the rest wait in the
# gateway's fair queue (64 places, 2 s). A tenant under its fair share may take TENANT_BURST
# places past a full replica's limit (`admission.tenant_burst`; unset: the gateway's default). Two `laneway bench`
# processes send at the same time, open loop (Poisson), 1000/64 streamed requests:
#   capacity  closed loop through the gateway, 16 clients: C requests/s
#   light     the light key alone at 3C/11 (its unloaded TTFT)
#   fair      light at 3C/11 and heavy at 30C/11 (10x; together 3x capacity), tenant keys
#   fifo      the same two rates without keys (one flow, first come, first served)
#   high      band 8 alone at C/3
#   priority  band 8 at C/3 under a band 1 flood at 3C
#   oneband   the same two rates both in band 4 (no priority)
#
#   flock /tmp/laneway-bench.lock benches/tenants.sh OUT_DIR [SECONDS]   (default 45 s a run)
#
# Writes each run's bench JSON (xz) and summary into OUT_DIR and prints the table of
# benches/tenants/table.py. LANEWAY=path picks the binary (default target/release/laneway).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:?usage: benches/tenants.sh OUT_DIR [SECONDS]}"
SECONDS_PER_RUN="${2:-45}"
LANEWAY="${LANEWAY:-$ROOT/target/release/laneway}"
API_WORKERS="${API_WORKERS:-4}"
PER_REPLICA="${PER_REPLICA:-4}"
TENANT_BURST="${TENANT_BURST:-}"
WORK="$(mktemp -d /tmp/laneway-tenants.XXXXXX)"
source "$ROOT/benches/peers/background.sh"
source "$ROOT/benches/peers/listening.sh"
mkdir -p "$OUT"

"$LANEWAY" sim --port 0 --profile h20-tp8 --speed 2 --id sim-0 --seed 1 --api-workers "$API_WORKERS" \
    >"$WORK/sim.out" 2>"$WORK/sim.err" &
PIDS+=($!)
SIM="$(listening_url "$WORK/sim.out")"

# Two gateways on the same replica (used one at a time): with tenants, and without.
for kind in tenants plain; do
    {
        echo "[admission]"
        echo "max_in_flight_per_replica = $PER_REPLICA"
        echo "queue_size = 64"
        echo "queue_timeout_ms = 2000"
        [[ -z "$TENANT_BURST" ]] || echo "tenant_burst = $TENANT_BURST"
        echo "[[replicas]]"
        echo "name = \"sim-0\""
        echo "url = \"$SIM\""
        echo "node = \"node-0\""
        if [[ "$kind" == tenants ]]; then
            printf '[[tenants]]\nname = "heavy"\nkeys = ["sk-heavy"]\n'
            printf '[[tenants]]\nname = "light"\nkeys = ["sk-light"]\n'
        fi
    } >"$WORK/$kind.toml"
    "$LANEWAY" serve --config "$WORK/$kind.toml" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
        >"$WORK/gateway-$kind.out" 2>"$WORK/gateway-$kind.err" &
    PIDS+=($!)
done
TENANTS="$(listening_url "$WORK/gateway-tenants.out")"
TENANTS_ADMIN="$(grep -o 'admin (metrics, health) on http://[0-9.:]*' "$WORK/gateway-tenants.out" | grep -o 'http://.*')"
PLAIN="$(listening_url "$WORK/gateway-plain.out")"

# run NAME TARGET RATE SEED [HEADER...]: one open-loop bench process.
run() {
    local name="$1" target="$2" rate="$3" seed="$4"
    shift 4
    local headers=()
    for header in "$@"; do headers+=(--header "$header"); done
    "$LANEWAY" bench --target "$name=$target" --workload 1000/64:1 --rate "$rate" \
        --max-concurrency 512 --duration "$SECONDS_PER_RUN" --seed "$seed" --timeout 60 \
        --goodput ttft:1000 tpot:50 --quiet "${headers[@]}" --json "$WORK/$name.json" \
        >"$OUT/$name.txt"
    xz -9 -c "$WORK/$name.json" >"$OUT/$name.json.xz"
}

"$LANEWAY" bench --target "capacity=$PLAIN" --workload 1000/64/c16 --requests 400 --seed 9 \
    --quiet --json "$WORK/capacity.json" >"$OUT/capacity.txt"
xz -9 -c "$WORK/capacity.json" >"$OUT/capacity.json.xz"
CAPACITY="$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["targets"][0]["summary"]; print(s["qpm"]/60)' "$WORK/capacity.json")"
rate() { python3 -c "print(round($CAPACITY * $1, 2))"; }
LIGHT="$(rate 3/11)"; HEAVY="$(rate 30/11)"; HIGH="$(rate 1/3)"; FLOOD="$(rate 3)"
echo "api workers $API_WORKERS, per replica $PER_REPLICA, tenant burst ${TENANT_BURST:-default}, capacity $CAPACITY req/s: light $LIGHT, heavy $HEAVY, high $HIGH, flood $FLOOD" | tee "$OUT/rates.txt"

# beside LOAD_ARGS... -- MEASURED_ARGS...: `run` MEASURED while LOAD runs beside it.
beside() {
    local load=()
    while [[ "$1" != -- ]]; do load+=("$1"); shift; done
    shift
    run "${load[@]}" &
    local pid=$!
    run "$@"
    wait "$pid"
}

# admission_snapshot NAME: the tenants gateway's admission waits and bursts so far.
admission_snapshot() {
    curl -s "$TENANTS_ADMIN/metrics" | grep -E '^laneway_admission_(wait_seconds|bursts_total)' \
        >"$OUT/admission-$1.txt"
}

run light-alone "$TENANTS" "$LIGHT" 1 "authorization: Bearer sk-light"
admission_snapshot before-fair
beside fair-heavy "$TENANTS" "$HEAVY" 2 "authorization: Bearer sk-heavy" \
    -- fair-light "$TENANTS" "$LIGHT" 1 "authorization: Bearer sk-light"
admission_snapshot after-fair
beside fifo-heavy "$PLAIN" "$HEAVY" 2 -- fifo-light "$PLAIN" "$LIGHT" 1
run high-alone "$PLAIN" "$HIGH" 3 "x-laneway-priority: 8"
beside priority-flood "$PLAIN" "$FLOOD" 4 "x-laneway-priority: 1" \
    -- priority-high "$PLAIN" "$HIGH" 3 "x-laneway-priority: 8"
beside oneband-flood "$PLAIN" "$FLOOD" 4 -- oneband-high "$PLAIN" "$HIGH" 3

python3 "$ROOT/benches/tenants/table.py" "$OUT" | tee "$OUT/table.md"
