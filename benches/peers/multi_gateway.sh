#!/bin/bash
# Several laneway gateways, one fleet: N `prefix_aware` gateways (no shared state) in front
# of one cold fleet of four h20-tp4-80k sims (4 API processes, clock x2); the load
# generator sends its requests to the gateways in turn (one target, N URLs). Prints the
# replicas' reported hit ratio and TTFT p50/p90. Ports 18102.. on 127.0.0.1.
# SHARED_STORE=1 starts a redis-server on 127.0.0.1:18100 and points every gateway's
# `[limits] store` at it, so that they share sessions' placements (`prefix.share_sessions`).
#
#   benches/peers/multi_gateway.sh BINARY N_GATEWAYS WORKLOAD REQUESTS
#   e.g. flock /tmp/laneway-bench.lock benches/peers/multi_gateway.sh \
#          target/release/laneway 2 mt_c16_t6_i300_o64 288
set -u
BIN=$1; N=$2; WL=$3; REQ=$4
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
D=$(mktemp -d); P=()
STORE=()
if [[ -n "${SHARED_STORE:-}" ]]; then
  redis-server --port 18100 --bind 127.0.0.1 --save "" --appendonly no > $D/redis.out 2>&1 & P+=($!)
  for k in $(seq 100); do redis-cli -p 18100 ping >/dev/null 2>&1 && break; sleep 0.1; done
  STORE=('[limits]' 'store = "redis://127.0.0.1:18100"')
fi
for i in 0 1 2 3; do taskset -c 0 $BIN sim --port 0 --config $ROOT/benches/peers/h20-tp4-80k.toml --api-workers 4 --speed 2 --id r$i > $D/s$i.out 2>$D/s$i.err & P+=($!); done
for i in 0 1 2 3; do for k in $(seq 100); do grep -q http $D/s$i.out 2>/dev/null && break; sleep 0.1; done; done
url() { grep -o 'http://[0-9.:]*' $D/s$1.out | head -1; }
URLS=()
for g in $(seq 1 $N); do
  port=$((18100 + 2*g)); admin=$((18101 + 2*g))
  { echo "listen = \"127.0.0.1:$port\""; echo "admin_listen = \"127.0.0.1:$admin\""; echo 'policy = "prefix_aware"'; for i in 0 1 2 3; do printf '[[replicas]]\nname = "r%s"\nurl = "%s"\n' $i $(url $i); done; printf '%s\n' "${STORE[@]}"; } > $D/gw$g.toml
  taskset -c 1 $BIN serve --config $D/gw$g.toml > $D/gw$g.out 2>$D/gw$g.err & P+=($!)
  for k in $(seq 100); do curl -sf http://127.0.0.1:$admin/health >/dev/null && break; sleep 0.1; done
  URLS+=("http://127.0.0.1:$port")
done
T="gw$N${SHARED_STORE:+-shared}=$(IFS=,; echo "${URLS[*]}")"
taskset -c 0 $BIN bench --quiet --target "$T" --workload $WL --requests $REQ --rounds 1 --json $D/out.json > $D/bench.out 2>&1
python3 - $D/out.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); t=d['targets'][0]; rec=t['records']
p=sum(x['prompt_tokens'] for x in rec); c=sum(x['cached_tokens'] for x in rec)
tt=sorted(x['ttft'] for x in rec)
print(t['name'],'requests',len(rec),'hit %.1f%%'%(100*c/p),'ttft p50 %d p90 %d ms'%(tt[len(tt)//2]/1000,tt[int(len(tt)*.9)]/1000), 'failures',sum(1 for x in rec if x['outcome']['kind']!='success'))
PY
kill "${P[@]}" 2>/dev/null; wait 2>/dev/null
[[ -n "${KEEP:-}" ]] && cp "$D/out.json" "$KEEP"; rm -rf "$D"
