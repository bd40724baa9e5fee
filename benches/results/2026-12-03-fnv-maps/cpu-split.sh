#!/usr/bin/env bash
# User and system CPU, and minor page faults, per tiny request: HAProxy keep-alive and laneway
# `spread`, each pinned to core 1 in front of benches/per_core.sh's nginx stub, wrk -c32 for
# 4 s on core 0, twice each in turn; the counters are the proxy's /proc/PID/stat around each run.
#   cpu-split.sh LANEWAY_BINARY
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
LANEWAY=${1:?laneway binary}
WORK="$(mktemp -d /tmp/sc.XXXXXX)"
source "$ROOT/benches/peers/background.sh"
source "$ROOT/benches/peers/listening.sh"
source "$ROOT/benches/per_core/stub.sh"
start_stub taskset -c 0
port="$(free_port)"
sed -e "s|@PORT@|$port|" -e "s|@BALANCE@|leastconn|" -e "s|@CONNECTION@|option http-keep-alive|" \
    -e "s|@NODELAY@|#|" -e "s|@SERVERS@|    server stub 127.0.0.1:$STUB_PORT|" \
    "$ROOT/benches/peers/haproxy.cfg" >"$WORK/h.cfg"
taskset -c 1 haproxy -f "$WORK/h.cfg" >"$WORK/h.out" 2>&1 & PIDS+=($!); HPID=$!
laneway_config "$WORK/l.toml" spread
taskset -c 1 "$LANEWAY" serve --config "$WORK/l.toml" >"$WORK/l.out" 2>"$WORK/l.err" & PIDS+=($!); LPID=$!
LURL="$(listening_url "$WORK/l.out")"
sleep 1
stat() { awk '{print $10, $14, $15}' /proc/$1/stat; }
for t in "haproxy $HPID http://127.0.0.1:$port" "laneway $LPID $LURL" "haproxy $HPID http://127.0.0.1:$port" "laneway $LPID $LURL"; do
  set -- $t
  taskset -c 0 wrk -t1 -c32 -d1s -s "$ROOT/benches/per_core/post.lua" "$3/v1/chat/completions" >/dev/null
  read f0 u0 s0 <<<"$(stat $2)"
  n=$(taskset -c 0 wrk -t1 -c32 -d4s -s "$ROOT/benches/per_core/post.lua" "$3/v1/chat/completions" | awk '/requests in/{print $1}')
  read f1 u1 s1 <<<"$(stat $2)"
  python3 -c "n=$n; print('$1', 'req', n, 'minflt/req %.4f'%(($f1-$f0)/n), 'user us/req %.2f'%(($u1-$u0)*1e4/n), 'sys us/req %.2f'%(($s1-$s0)*1e4/n))"
done
