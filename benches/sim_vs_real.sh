#!/usr/bin/env bash
# The simulator checked against the real engine it models (docs/sim.md, "Checked against a
# real engine").
#
#   benches/sim_vs_real.sh [single] [workloads] [--quick]
#
# single     one real vLLM replica (scripts/real-vllm.sh, core 0, one API process) and one
#            `laneway sim --profile vllm-cpu-tiny` (core 0), one after the other: TTFT by
#            prompt size (128 to 8,192 tokens, one request at a time, salted) and TPOT by
#            streams decoding at once (1, 4, 16), and the spread of one stream's token gaps,
#            side by side with their ratio (benches/peers/single_requests.py). The profile
#            should be within 15% of each.
# workloads  benches/peers.sh's real-conv, real-prefix and real-mixed on two real replicas,
#            then the same on two simulated ones (REAL_FLEET=sim REAL_SIM_PROFILE=vllm-cpu-tiny,
#            one API process each), the same targets, seed and rounds; the two result files
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
        single | workloads) PARTS+=("$arg") ;;
        --quick) QUICK=(--quick) ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | grep '^#'; exit 0 ;;
        *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done
[[ ${#PARTS[@]} -eq 0 ]] && PARTS=(single)
[[ -x "$LANEWAY" ]] || { echo "no laneway binary at $LANEWAY (cargo build --release)" >&2; exit 1; }
mkdir -p "$OUT"
SIM_PID=""
cleanup() {
    [[ -n "$SIM_PID" ]] && kill "$SIM_PID" 2>/dev/null || true
    bash "$ROOT/scripts/real-vllm.sh" stop --ports "$PORT" >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

single() {
    bash "$ROOT/scripts/real-vllm.sh" setup
    bash "$ROOT/scripts/real-vllm.sh" serve --replicas 1 --base-port "$PORT" --cores 0 --api-servers 1
    python3 "$ROOT/benches/peers/single_requests.py" --url "http://127.0.0.1:$PORT" --name real \
        --json "$OUT/single-real.json"
    bash "$ROOT/scripts/real-vllm.sh" stop --ports "$PORT"
    local log="$OUT/sim.out" url=""
    taskset -c 0 "$LANEWAY" sim --port 0 --profile vllm-cpu-tiny --api-workers 1 >"$log" 2>&1 &
    SIM_PID=$!
    for _ in $(seq 1 100); do
        url="$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -n1 || true)"
        [[ -n "$url" ]] && break
        sleep 0.1
    done
    [[ -n "$url" ]] || { echo "the simulator did not start: $(cat "$log")" >&2; exit 1; }
    python3 "$ROOT/benches/peers/single_requests.py" --url "$url" --name sim \
        --json "$OUT/single-sim.json"
    kill "$SIM_PID"; SIM_PID=""
    python3 - "$OUT/single-real.json" "$OUT/single-sim.json" >"$OUT/single.md" <<'EOF'
import json, sys
real, sim = (json.load(open(path)) for path in sys.argv[1:3])
print("| figure | real vLLM | sim vllm-cpu-tiny | sim / real |")
print("|---|---|---|---|")
for kind, unit, label in (("ttft_ms", "prompt tokens", "TTFT"), ("tpot_ms", "streams", "TPOT")):
    for key, value in real[kind].items():
        other = sim[kind].get(key)
        ratio = f"{other / value:.2f}" if value and other else "-"
        print(f"| {label} at {key} {unit} | {value} ms | {other} ms | {ratio} |")
value, other = real.get("itl_cv"), sim.get("itl_cv")
ratio = f"{other / value:.2f}" if value and other else "-"
print(f"| spread of one stream's token gaps (sd / mean) | {value} | {other} | {ratio} |")
EOF
    cat "$OUT/single.md"
}

workloads() {
    PEERS_LANEWAY="$LANEWAY" PEERS_OUT="$OUT/real" REAL_API_SERVERS=1 \
        bash "$ROOT/benches/peers.sh" "${QUICK[@]}" real-conv real-prefix real-mixed
    PEERS_LANEWAY="$LANEWAY" PEERS_OUT="$OUT/sim" REAL_API_SERVERS=1 REAL_FLEET=sim \
        REAL_SIM_PROFILE=vllm-cpu-tiny \
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
