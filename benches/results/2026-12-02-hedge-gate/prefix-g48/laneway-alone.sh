#!/usr/bin/env bash
# 48 shared-prefix groups through laneway `prefix_aware` alone, on a fleet like the prefix
# part's, keeping the gateway's metrics at the end (predicted against reported cached tokens).
#   laneway-alone.sh LANEWAY_BINARY OUT_DIR   (run from anywhere; needs the repository at ROOT)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../../.." && pwd)"; LW="$1"; O="$2"
mkdir -p "$O"; WORK=$(mktemp -d /tmp/g48w.XXXX)
source "$ROOT/benches/peers/background.sh"
source "$ROOT/benches/peers/listening.sh"
URLS=()
for id in r0 r1 r2 r3; do
  taskset -c 0 $LW sim --port 0 --config $ROOT/benches/peers/h20-tp4-80k.toml --api-workers 4 --speed 2 --id $id > $WORK/sim-$id.out 2>$WORK/sim-$id.err &
  PIDS+=($!)
done
for id in r0 r1 r2 r3; do URLS+=("$(listening_url $WORK/sim-$id.out)"); done
port=$(free_port); admin=$(free_port)
{ echo "listen = \"127.0.0.1:$port\""; echo "admin_listen = \"127.0.0.1:$admin\""; echo 'policy = "prefix_aware"'
  for i in 0 1 2 3; do printf '[[replicas]]\nname = "tp4-%s"\nurl = "%s"\n' $i "${URLS[$i]}"; done; } > $WORK/lw.toml
taskset -c 1 $LW serve --config $WORK/lw.toml > $WORK/lw.out 2> $WORK/lw.err &
PIDS+=($!)
for t in $(seq 50); do curl -sf http://127.0.0.1:$admin/health >/dev/null && break; sleep 0.2; done
taskset -c 0 $LW bench --quiet --target lw=http://127.0.0.1:$port --workload sp_g48_p4000_q400_o64_c48 --requests 960 --rounds 3 --seed 12 --json $O/out.json --timeout 900 > $O/table.txt
curl -s http://127.0.0.1:$admin/metrics > $O/metrics.txt
curl -s http://127.0.0.1:$admin/admin/replicas > $O/replicas.json || true
