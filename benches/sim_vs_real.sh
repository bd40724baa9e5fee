#!/usr/bin/env bash
# The simulator checked against the real engine it models (docs/sim.md, "Checked against a
# real engine").
#
#   benches/sim_vs_real.sh [single] [load] [workloads] [--quick]
#
# single     one real vLLM replica (scripts/real-vllm.sh, core 0, one API process) and one
#            `laneway sim --profile vllm-cpu-tiny` (core 0), one after the other: TTFT by
#            prompt size (128 to 8,192 tokens, one request at a time, salted) and TPOT by
#            streams decoding at once (1, 4, 16) and by context (one stream over 128 to 8,192
#            tokens), and the spread of one stream's token gaps (benches/peers/
#            single_requests.py); then the profile's engine costs fitted to the real figures
#            (benches/peers/fit_profile.py: vllm-cpu-tiny-fitted.toml, the host's speed moves
#            between days) and a second sim run on it. Both side by side with their ratio to
#            the real engine; the fitted profile should be within 15% of each.
# load       one real replica (core 0; one, then two API processes) under closed-loop
#            conversations from the load client pinned to core 1, then from the client on
#            core 0 beside the replica; then one `laneway sim` (the fitted profile if `single`
#            wrote one here; one, then two API workers) from core 1: TTFT p50/p90 and TPOT
#            p50 side by side (load.md). About 6 minutes.
# workloads  benches/peers.sh's real-conv, real-prefix and real-mixed on two real replicas,
#            then the same on two simulated ones (REAL_FLEET=sim, the profile `single` fitted
#            in the same output folder if there is one, else vllm-cpu-tiny; one API process
#            each), the same targets, seed and rounds; the two result files
#            side by side show TTFT p50/p90, TPOT, goodput and the targets' rank order on each
#            (workloads.md, by benches/peers/real_table.py --compare).
#            Long: about twice the real parts (--quick: a quarter of that).
# Results: benches/results/<date>-sim-vs-real/ (override with SIM_VS_REAL_OUT).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LANEWAY="${PEERS_LANEWAY:-$ROOT/target/release/laneway}"
OUT="${SIM_VS_REAL_OUT:-$ROOT/benches/results/$(date -u +%Y-%m-%d)-sim-vs-real}"
PORT="${SIM_VS_REAL_PORT:-18700}"
PARTS=() QUICK=()
for arg in "$@"; do
    case "$arg" in
        single | load | workloads) PARTS+=("$arg") ;;
        --quick) QUICK=(--quick) ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | grep '^#'; exit 0 ;;
        *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done
[[ ${#PARTS[@]} -eq 0 ]] && PARTS=(single)
[[ -x "$LANEWAY" ]] || { echo "no laneway binary at $LANEWAY (cargo build --release)" >&2; exit 1; }
mkdir -p "$OUT"
SIM_PID=""
FITTED="$OUT/vllm-cpu-tiny-fitted.toml"
cleanup() {
    [[ -n "$SIM_PID" ]] && kill "$SIM_PID" 2>/dev/null || true
    bash "$ROOT/scripts/real-vllm.sh" stop --ports "$PORT" >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

# start_sim ARGS...: one `laneway sim --port 0 ARGS` on core 0, its pid in SIM_PID and its
# URL in SIM_URL once it listens.
SIM_URL=""
start_sim() {
    local log="$OUT/sim.out"
    taskset -c 0 "$LANEWAY" sim --port 0 "$@" >"$log" 2>&1 &
    SIM_PID=$!
    SIM_URL=""
    for _ in $(seq 1 100); do
        SIM_URL="$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -n1 || true)"
        [[ -n "$SIM_URL" ]] && break
        sleep 0.1
    done
    [[ -n "$SIM_URL" ]] || { echo "the simulator did not start: $(cat "$log")" >&2; exit 1; }
}

# One `laneway sim` started with the given profile arguments, measured as the real replica
# was, into the JSON file named first.
sim_single() {
    local json="$1"
    shift
    start_sim "$@" --api-workers 1
    python3 "$ROOT/benches/peers/single_requests.py" --url "$SIM_URL" --name sim --json "$json"
    kill "$SIM_PID"; SIM_PID=""
}

single() {
    bash "$ROOT/scripts/real-vllm.sh" setup
    bash "$ROOT/scripts/real-vllm.sh" serve --replicas 1 --base-port "$PORT" --cores 0 --api-servers 1
    python3 "$ROOT/benches/peers/single_requests.py" --url "http://127.0.0.1:$PORT" --name real \
        --json "$OUT/single-real.json"
    bash "$ROOT/scripts/real-vllm.sh" stop --ports "$PORT"
    # The profile refitted to this hour's real figures: the host's speed moves between days.
    python3 "$ROOT/benches/peers/fit_profile.py" --figures "$OUT/single-real.json" \
        --profile "$ROOT/config/profiles/vllm-cpu-tiny.toml" --out "$FITTED" | tee "$OUT/fitted.json"
    sim_single "$OUT/single-sim.json" --profile vllm-cpu-tiny
    sim_single "$OUT/single-sim-fitted.json" --config "$FITTED"
    python3 - "$OUT/single-real.json" "$OUT/single-sim.json" "$OUT/single-sim-fitted.json" \
        >"$OUT/single.md" <<'EOF'
import json, sys
real, sim, fitted = (json.load(open(path)) for path in sys.argv[1:4])
print("| figure | real vLLM | sim vllm-cpu-tiny | sim / real | sim, fitted this hour | fitted / real |")
print("|---|---|---|---|---|---|")
def ratio(value, other):
    return f"{other / value:.2f}" if value and other else "-"
kinds = (("ttft_ms", "prompt tokens", "TTFT"), ("tpot_ms", "streams", "TPOT"),
         ("tpot_by_context_ms", "tokens of context, one stream", "TPOT"),
         ("tpot_streams_over_context_ms", "streams x tokens of context (not fitted)", "TPOT"))
for kind, unit, label in kinds:
    for key, value in real.get(kind, {}).items():
        one, two = sim.get(kind, {}).get(key), fitted.get(kind, {}).get(key)
        print(f"| {label} at {key} {unit} | {value} ms | {one} ms | {ratio(value, one)} "
              f"| {two} ms | {ratio(value, two)} |")
value, one, two = real.get("itl_cv"), sim.get("itl_cv"), fitted.get("itl_cv")
print(f"| spread of one stream's token gaps (sd / mean) | {value} | {one} | {ratio(value, one)} "
      f"| {two} | {ratio(value, two)} |")
EOF
    cat "$OUT/single.md"
}

# One replica under closed-loop conversations (8 x 5 turns, 400-token questions, 64-token
# answers, no session), measured by the load client pinned to the other core, then by the
# client on the replica's own core, with one and with two API processes, then the same
# against the simulator on the profile `single` fitted (else the built-in one): which of the
# workloads' additions costs the real engine what the simulator does not see.
LOAD_CONV=(--workload conv --clients 8 --turns 5 --input-tokens 400 --output-tokens 64
    --no-session --rounds 2 --seed 47 --slo-ttft-ms 1000 --slo-tpot-ms 50)
load_run() {
    local name="$1" url="$2" core="$3"
    taskset -c "$core" python3 "$ROOT/benches/peers/real_client.py" "${LOAD_CONV[@]}" \
        --name "load-$name" --run-id "$name-$(date +%s)" --target "$name=$url" \
        --calibrate-url "$url" --replicas "$url" --json "$OUT/load-$name.json" >/dev/null
}

load() {
    bash "$ROOT/scripts/real-vllm.sh" setup
    local api profile=(--profile vllm-cpu-tiny)
    for api in 1 2; do
        bash "$ROOT/scripts/real-vllm.sh" serve --replicas 1 --base-port "$PORT" --cores 0 \
            --api-servers "$api"
        load_run "real-api$api-client-apart" "http://127.0.0.1:$PORT" 1
        load_run "real-api$api-client-beside" "http://127.0.0.1:$PORT" 0
        bash "$ROOT/scripts/real-vllm.sh" stop --ports "$PORT"
    done
    [[ -s "$FITTED" ]] && profile=(--config "$FITTED")
    for api in 1 2; do
        start_sim "${profile[@]}" --served-model-name tiny --api-workers "$api"
        load_run "sim-api$api-client-apart" "$SIM_URL" 1
        kill "$SIM_PID"; SIM_PID=""
    done
    python3 - "$OUT"/load-real-api{1,2}-client-{apart,beside}.json \
        "$OUT"/load-sim-api{1,2}-client-apart.json >"$OUT/load.md" <<'EOF'
import json, statistics, sys
print("| one replica, 8 conversations x 5 turns | TTFT p50 ms | TTFT p90 ms | TPOT p50 ms | hit ratio |")
print("|---|---|---|---|---|")
for path in sys.argv[1:]:
    doc = json.load(open(path))
    for target in doc["targets"]:
        runs = [run for run in doc["runs"] if run["target"] == target]
        mean = lambda key: statistics.mean(run[key] for run in runs)
        print(f"| {target} | {mean('ttft_p50') * 1000:.0f} | {mean('ttft_p90') * 1000:.0f} "
              f"| {mean('tpot_p50') * 1000:.1f} | {mean('hit_ratio'):.3f} |")
EOF
    cat "$OUT/load.md"
}

workloads() {
    PEERS_LANEWAY="$LANEWAY" PEERS_OUT="$OUT/real" REAL_API_SERVERS=1 \
        bash "$ROOT/benches/peers.sh" "${QUICK[@]}" real-conv real-prefix real-mixed
    # The profile fitted by `single` in this output folder if there is one (run `single`
    # first, within the hour), else the built-in one.
    local profile=vllm-cpu-tiny
    [[ -s "$FITTED" ]] && profile="$FITTED"
    PEERS_LANEWAY="$LANEWAY" PEERS_OUT="$OUT/sim" REAL_API_SERVERS=1 REAL_FLEET=sim \
        REAL_SIM_PROFILE="$profile" \
        bash "$ROOT/benches/peers.sh" "${QUICK[@]}" real-conv real-prefix real-mixed
    local name
    for name in real-conv real-prefix real-mixed; do
        if [[ -s "$OUT/real/$name.json" && -s "$OUT/sim/$name.json" ]]; then
            python3 "$ROOT/benches/peers/real_table.py" --compare "$OUT/real/$name.json" "$OUT/sim/$name.json"
        fi
    done >"$OUT/workloads.md"
    cat "$OUT/workloads.md"
    echo "real: $OUT/real/results.md   sim: $OUT/sim/results.md   side by side: $OUT/workloads.md"
}

for part in "${PARTS[@]}"; do "$part"; done
