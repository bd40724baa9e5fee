#!/usr/bin/env bash
# Side-by-side benchmark of laneway against direct access, HAProxy, sglang-router and
# vllm-router, in front of one simulated TP8x2 fleet (two `laneway sim --profile h20-tp8
# --api-workers 4` replicas on loopback).
#
#   benches/peers.sh [--quick] [install|short|long|overhead|streams|prefix|topologies|degraded|hetero|sweep|all]...
#   benches/peers.sh [--quick] [real-conv|real-prefix|real-mixed|real-entries]...
#
# Parts: short (1000/300/c6 and a short-output sweep), long (9000/600/c2, 50000/1000/c1),
# overhead (tiny requests at 5,000 req/s open loop, then saturation), streams (5,000
# concurrent SSE streams through laneway), prefix (prefix-cache and session-aware routing on
# a TP4x4 fleet, benches/peers/prefix.sh), topologies (the business cases and a sweep on
# each simulated topology, beside the published cells); prefix and topologies are not part
# of `all`. `all` runs every part (about 17 minutes on
# 2 cores, 3 of them building laneway); `--quick` runs a much smaller version of each
# (about 2.5 minutes after the build). degraded, hetero and sweep (benches/peers/routing.sh)
# compare balancing on slowed, mixed and small fleets; `all` leaves them out.
# real-conv, real-prefix, real-mixed and real-entries measure on two real vLLM replicas
# (benches/peers/real.sh, which lists its targets, workloads and REAL_* settings), with their
# results in benches/results/<date>-real[-quick]/; `all` leaves them out.
# Results go to benches/results/<date>[-quick]/ (override with PEERS_OUT=DIR):
# results.md, one JSON per case, SVG charts per case.
#
# CPU pinning (2 cores): the proxy under comparison gets core 1 to itself; the simulated
# fleet and the load generator share core 0. Every proxy is thus measured on the same one
# core (HAProxy with nbthread 1, the routers' and laneway's runtimes confined by taskset),
# and the direct baseline pays no proxy CPU at all. Set PEERS_NO_PIN=1 to disable.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS_DIR="$ROOT/benches/peers"
QUICK=0
PARTS=()
for arg in "$@"; do
    case "$arg" in
        --quick) QUICK=1 ;;
        install | short | long | overhead | streams | prefix | topologies | degraded | hetero | sweep | all) PARTS+=("$arg") ;;
        real-conv | real-prefix | real-mixed | real-entries) PARTS+=("$arg") ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | grep '^#'; exit 0 ;;
        *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done
[[ ${#PARTS[@]} -eq 0 ]] && PARTS=(all)
[[ " ${PARTS[*]} " == *" all "* ]] && PARTS=(short long overhead streams)

DATE="$(date -u +%Y-%m-%d)"
SUFFIX=""
[[ $QUICK -eq 1 ]] && SUFFIX="-quick"
OUT="${PEERS_OUT:-$ROOT/benches/results/$DATE$SUFFIX}"
WORK="$(mktemp -d /tmp/laneway-peers.XXXXXX)"
VENV="${PEERS_VENV:-$ROOT/target/peers-venv}"
# PEERS_KEEP_LOGS=1 copies the stderr of every target and simulated replica to $OUT/logs/ at the end (with
# RUST_LOG=info,laneway::placement=debug: laneway's placement trace).
KEEP_LOGS="${PEERS_KEEP_LOGS:-0}"
# PEERS_LANEWAY=BINARY measures that build instead of building the tree's (it is also the
# load generator, `laneway bench`).
LANEWAY="${PEERS_LANEWAY:-$ROOT/target/release/laneway}"
# LANEWAY_EXTRA_CONFIG: configuration lines (printf %b escapes, e.g.
# "[admission]\nmax_unanswered_per_replica = 4") appended to the configuration of every
# laneway target of the build under test in the degraded, hetero, sweep and prefix parts,
# after the tables the script writes (baselines are left as they are): a knob measured
# without a new build. Tables the script writes inline (each entry's `slo`) cannot be
# reopened this way.
LANEWAY_EXTRA_CONFIG="${LANEWAY_EXTRA_CONFIG:-}"
STARTED_AT=$SECONDS
# An open loop against a slow target holds many connections open: allow what the system allows.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

if [[ -n "${PEERS_NO_PIN:-}" ]]; then
    PIN_PROXY=()
    PIN_FLEET=()
else
    PIN_PROXY=(taskset -c 1)
    PIN_FLEET=(taskset -c 0)
fi

# ---------------------------------------------------------------------------- processes
# Every process this script starts is remembered by PID and stopped by PID on exit.
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]:-}"; do
        [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]:-}"; do
        [[ -n "$pid" ]] && wait "$pid" 2>/dev/null || true
    done
    PIDS=()
    TARGET_PIDS=()
}
# keep_logs: the run's stderr files into $OUT/logs/ if PEERS_KEEP_LOGS asks (never fails).
keep_logs() {
    [[ "$KEEP_LOGS" == 1 ]] || return 0
    mkdir -p "$OUT/logs" 2>/dev/null && cp "$WORK"/*.err "$OUT/logs/" 2>/dev/null
    return 0
}
trap 'cleanup; keep_logs; rm -rf "$WORK"' EXIT

# CPU accounting: every proxy's PID by target name, so that each case reports the CPU
# time each proxy spent on it, per successful request (the honest capacity figure on a
# machine whose load generator saturates before a proxy does).
declare -A TARGET_PIDS=()

# tree_ticks PID: user + system clock ticks of PID and its live descendants.
tree_ticks() {
    local pid="$1" total child
    total="$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)"
    for child in $(pgrep -P "$pid" 2>/dev/null); do
        total=$((total + $(tree_ticks "$child")))
    done
    echo "$total"
}

log() { printf '[peers %4ds] %s\n' "$((SECONDS - STARTED_AT))" "$*" >&2; }

# Waits (at most $2 seconds) until something answers HTTP on URL $1.
wait_http() {
    local url="$1" limit="${2:-60}" tries
    for ((tries = 0; tries < limit * 5; tries++)); do
        if curl -s -o /dev/null --max-time 1 "$url"; then return 0; fi
        sleep 0.2
    done
    log "nothing answered at $url within ${limit}s"
    return 1
}

# listening_url FILE: the URL a `laneway sim` or `serve` prints first.
source "$PEERS_DIR/listening.sh"
# part_prefix and its TP4x4 fleet and starters.
source "$PEERS_DIR/prefix.sh"
# part_topologies
source "$PEERS_DIR/topologies.sh"
# Parts degraded, hetero and sweep.
source "$PEERS_DIR/routing.sh"
# Parts real-conv, real-prefix, real-mixed and real-entries (real vLLM replicas).
source "$PEERS_DIR/real.sh"

# ------------------------------------------------------------------------------ install
install_tools() {
    # The topologies part measures simulated topologies directly: no peer to install.
    if [[ " ${PARTS[*]} " == " topologies " ]]; then
        build_laneway
        return
    fi
    if ! command -v haproxy >/dev/null; then
        log "installing haproxy (Debian)"
        bash "$ROOT/scripts/install-bench-deps.sh" >/dev/null
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        log "creating $VENV"
        python3 -m venv "$VENV"
    fi
    if ! "$VENV/bin/python" -m pip show sglang-router vllm-router >/dev/null 2>&1; then
        log "installing sglang-router 0.3.2 and vllm-router 0.1.17 (PyPI)"
        "$VENV/bin/python" -m pip install --quiet sglang-router==0.3.2 vllm-router==0.1.17
    fi
    build_laneway
}

build_laneway() {
    [[ -n "${PEERS_LANEWAY:-}" ]] && return
    log "building laneway (release)"
    (cd "$ROOT" && cargo build --release --quiet --bin laneway)
}

# -------------------------------------------------------------------------------- fleet
# start_fleet SPEED PROFILE-ARGS...: starts two replicas with 4 API workers each at the
# given clock speed; sets R0 and R1 to their URLs. Prefix caching is off: every target is
# sent the same seeded prompts in turn, so with it on, targets after the first would find
# the earlier targets' prompts cached (the field's business cases have no reuse; the
# `prefix` part measures caching on fleets of its own).
start_fleet() {
    local speed="$1" id
    shift
    for id in r0 r1; do
        "${PIN_FLEET[@]}" "$LANEWAY" sim --port 0 "$@" --api-workers 4 --no-enable-prefix-caching \
            --speed "$speed" --id "$id" >"$WORK/sim-$id.out" 2>"$WORK/sim-$id.err" &
        PIDS+=($!)
    done
    R0="$(listening_url "$WORK/sim-r0.out")"
    R1="$(listening_url "$WORK/sim-r1.out")"
    log "fleet ($*, speed $speed): $R0 $R1"
}

# ------------------------------------------------------------------------------- peers
# Each start_* function starts one ingress in front of R0 and R1 and appends
# NAME=URL to TARGETS. A peer that fails to start is reported and left out.
TARGETS=()
LANEWAY_PID=""
LANEWAY_APPEND=""

# start_laneway [NAME [SHORT_STRATEGY]]: laneway with the template's configuration, or
# with the short entry's strategy replaced (e.g. `spread`: a fixed set of 16 connections
# per replica instead of a fresh connection per request).
start_laneway() {
    local name="${1:-laneway}" short_strategy="${2:-}" port admin config
    port="$(free_port)"
    admin="$(free_port)"
    config="$WORK/$name.toml"
    sed -e "s|@LISTEN@|127.0.0.1:$port|" -e "s|@ADMIN@|127.0.0.1:$admin|" \
        -e "s|@R0@|$R0|" -e "s|@R1@|$R1|" "$PEERS_DIR/laneway-tp8x2.toml" >"$config"
    if [[ "$short_strategy" == spread ]]; then
        sed -i 's|^strategy = "force_close"|strategy = "spread"\nspread_connections = 16|' "$config"
    fi
    # A part may add settings (TOML tables the template does not have).
    [[ -n "$LANEWAY_APPEND" ]] && printf '%s\n' "$LANEWAY_APPEND" >>"$config"
    "${PIN_PROXY[@]}" "$LANEWAY" serve --config "$config" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    LANEWAY_PID=$!
    PIDS+=("$LANEWAY_PID")
    if wait_http "http://127.0.0.1:$admin/health" 30; then
        TARGETS+=("$name=http://127.0.0.1:$port")
        TARGET_PIDS[$name]="$LANEWAY_PID"
    else
        log "laneway did not start; see below and $PEERS_DIR/laneway-tp8x2.toml"
        tail -n 5 "$WORK/laneway.err" >&2 || true
        LANEWAY_PID=""
    fi
}

# start_haproxy NAME BALANCE close|keepalive nodelay|default: HAProxy in front of R0 and R1.
start_haproxy() {
    start_haproxy_on "$1" "$2" "$3" "$4" "$R0" "$R1"
}

# start_haproxy_on NAME BALANCE close|keepalive nodelay|default URL...: HAProxy (nbthread 1)
# register_target NAME URL HEALTH_URL SECONDS LOG: once HEALTH_URL answers (within SECONDS),
# the process started last is target NAME at URL; otherwise LOG's tail says why not.
register_target() {
    local name="$1" url="$2" health="$3" seconds="$4" log_file="$5"
    if wait_http "$health" "$seconds"; then
        TARGETS+=("$name=$url")
        TARGET_PIDS[$name]="${PIDS[-1]}"
    else
        log "$name did not start"; tail -n 5 "$log_file" >&2 || true
    fi
}

# in front of the given replicas, named r0, r1, ...
start_haproxy_on() {
    local name="$1" balance="$2" connection="$3" nodelay="$4" port config servers="" url index=0
    shift 4
    port="$(free_port)"
    config="$WORK/$name.cfg"
    for url in "$@"; do
        servers+="    server r$index ${url#http://}"$'\n'
        index=$((index + 1))
    done
    local connection_line="option http-keep-alive"
    [[ "$connection" == close ]] && connection_line="option httpclose"
    local nodelay_line="# option http-no-delay (off: HAProxy's default)"
    [[ "$nodelay" == nodelay ]] && nodelay_line="option http-no-delay"
    awk -v port="$port" -v balance="$balance" -v conn="$connection_line" \
        -v nodelay="$nodelay_line" -v servers="${servers%$'\n'}" '
        { gsub("@PORT@", port); gsub("@BALANCE@", balance); gsub("@CONNECTION@", conn);
          gsub("@NODELAY@", nodelay); if ($0 == "@SERVERS@") { print servers; next } print }' \
        "$PEERS_DIR/haproxy.cfg" >"$config"
    "${PIN_PROXY[@]}" haproxy -f "$config" -db >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    register_target "$name" "http://127.0.0.1:$port" "http://127.0.0.1:$port/health" 10 "$WORK/$name.out"
}

# start_router sglang|vllm POLICY: the router in front of R0 and R1.
start_router() {
    start_router_on "$1" "$2" "$R0" "$R1"
}

# start_router_on sglang|vllm POLICY URL...: the router in front of the given replicas.
start_router_on() {
    local kind="$1" policy="$2" port metrics name command
    shift 2
    port="$(free_port)"
    metrics="$(free_port)"
    name="$kind-${policy//_/-}"
    if [[ "$kind" == sglang ]]; then
        command=("$VENV/bin/python" -m sglang_router.launch_router)
    else
        command=("$VENV/bin/vllm-router")
    fi
    "${PIN_PROXY[@]}" "${command[@]}" --worker-urls "$@" --policy "$policy" \
        --host 127.0.0.1 --port "$port" --prometheus-port "$metrics" \
        --worker-startup-check-interval 1 --disable-retries >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    register_target "$name" "http://127.0.0.1:$port" "http://127.0.0.1:$port/health" 60 "$WORK/$name.out"
}

# Starts every ingress in front of the current fleet. Direct access is the load
# generator's own round robin over both replicas with keep-alive connections: the field's
# "keep-alive client" with no proxy in between.
start_all_peers() {
    TARGETS=("direct=$R0,$R1")
    start_laneway
    start_haproxy haproxy-rr roundrobin keepalive default
    start_haproxy haproxy-rr-nd roundrobin keepalive nodelay
    start_haproxy haproxy-lc leastconn keepalive default
    start_haproxy haproxy-lc-nd leastconn keepalive nodelay
    start_haproxy haproxy-lc-close leastconn close default
    start_haproxy haproxy-lc-close-nd leastconn close nodelay
    start_router sglang round_robin
    start_router sglang "$SGLANG_LOAD_POLICY"
    start_router vllm round_robin
    start_router vllm "$VLLM_LOAD_POLICY"
    log "targets: ${TARGETS[*]}"
}

# The routers' load-aware policy: power_of_two polls each worker's /get_load, which the
# simulator serves in SGLang's shape (a real vLLM does not, see the field notes), so here
# it really is load-aware. cache_aware (their default) only balances past an imbalance of
# 32 requests, which these cases never reach; set *_LOAD_POLICY to measure it instead.
SGLANG_LOAD_POLICY="${SGLANG_LOAD_POLICY:-power_of_two}"
VLLM_LOAD_POLICY="${VLLM_LOAD_POLICY:-power_of_two}"

# ------------------------------------------------------------------------------ measure
# bench CASE_NAME ARGS... : runs laneway bench over TARGETS, appends its table to
# results.md, keeps its JSON and charts.
bench() {
    local case_name="$1"
    shift
    log "case $case_name: laneway bench $*"
    local table name
    declare -A ticks_before=()
    for name in "${!TARGET_PIDS[@]}"; do ticks_before[$name]="$(tree_ticks "${TARGET_PIDS[$name]}")"; done
    table="$("${PIN_FLEET[@]}" "$LANEWAY" bench --quiet --target "${TARGETS[@]}" "$@" \
        --json "$OUT/$case_name.json" --plot "$OUT/charts/$case_name" --timeout 900)"
    {
        echo "### $case_name"
        echo
        echo '```'
        echo "laneway bench --target <as above> $*"
        echo '```'
        echo
        echo "$table"
        echo
        local chart links=()
        for chart in "$OUT/charts/$case_name"/*.svg; do
            [[ -e "$chart" ]] && links+=("[$(basename "$chart" .svg)](charts/$case_name/$(basename "$chart"))")
        done
        echo "Charts: ${links[*]:-none}. Every request: \`$case_name.json.xz\`."
        echo
    } >>"$OUT/results.md"
    {
        echo "{"
        local first=1
        for name in "${!TARGET_PIDS[@]}"; do
            [[ $first -eq 1 ]] || echo ","
            first=0
            echo "\"$name\": $(( $(tree_ticks "${TARGET_PIDS[$name]}") - ${ticks_before[$name]} ))"
        done
        echo "}"
    } >"$OUT/$case_name.cpu.json"
    python3 "$PEERS_DIR/verdict.py" cpu "$OUT/$case_name.json" "$OUT/$case_name.cpu.json" "$(getconf CLK_TCK)" \
        | tee -a "$OUT/results.md"
    # Every request of an overhead run is some 70 MB of JSON; xz keeps a few percent of it.
    xz -T2 -f "$OUT/$case_name.json"
    echo "$table"
}

part_short() {
    local speed=1 requests=18 sweep="c128_r256_t64" ramp=3
    [[ $QUICK -eq 1 ]] && { speed=4; requests=6; sweep="c64_r128_t32"; ramp=0.75; }
    start_fleet "$speed" --profile h20-tp8
    start_all_peers
    echo -e "## Short requests (fleet speed x$speed)\n" >>"$OUT/results.md"
    # Once with the six clients connecting in the same millisecond (every proxy then opens
    # its first upstream connections in a burst, which spreads them over the API workers),
    # once with the clients starting over $ramp s, as real clients connect over time: the
    # case in which keep-alive connections pile onto few API workers (field notes 3).
    bench short-1000-300-c6 --workload 1000/300/c6 --requests "$requests"
    bench short-1000-300-c6-ramp --workload 1000/300/c6 --requests "$requests" --ramp-up "$ramp"
    cleanup
    # The sweep at clock x4: at x1 its 256 requests per target, through 13 targets, take
    # longer than the whole script may. Wall-clock figures are then a quarter of the
    # simulated ones, alike for every target.
    start_fleet "$((speed * 4))" --profile h20-tp8
    start_all_peers
    echo -e "## Short-output sweep (fleet speed x$((speed * 4)))\n" >>"$OUT/results.md"
    bench sweep-$sweep --workload "$sweep" --rounds 1
    cleanup
}

part_long() {
    local speed=4 r9k=6 r50k=3
    [[ $QUICK -eq 1 ]] && { speed=16; r9k=2; r50k=1; }
    start_fleet "$speed" --profile h20-tp8
    start_all_peers
    echo -e "## Long requests (fleet speed x$speed)\n" >>"$OUT/results.md"
    bench long-9000-600-c2 --workload 9000/600/c2 --requests "$r9k" --rounds "$((r9k / 2))"
    bench long-50000-1000-c1 --workload 50000/1000/c1 --requests "$r50k" --rounds "$r50k"
    cleanup
}

part_overhead() {
    local seconds=6 saturation_seconds=4
    [[ $QUICK -eq 1 ]] && { seconds=1.5; saturation_seconds=1; }
    # A replica as close to free as the simulator gets (its timer still rounds to about
    # a millisecond), so the figures are those of the path in front of it.
    start_fleet 1 --config "$PEERS_DIR/overhead-replica.toml"
    TARGETS=("direct=$R0,$R1")
    start_laneway
    start_laneway laneway-spread spread
    start_haproxy haproxy-rr-nd roundrobin keepalive nodelay
    start_haproxy haproxy-lc-close-nd leastconn close nodelay
    start_router sglang round_robin
    start_router vllm round_robin
    echo -e "## Overhead: tiny requests\n" >>"$OUT/results.md"
    bench overhead-5000rps --workload tiny --rate 5000 --duration "$seconds" --rounds 2
    bench saturation-c32 --workload tiny --max-concurrency 32 --duration "$saturation_seconds" --rounds 2
    cleanup
}

# choice_events_sent: events with a choice both replicas have streamed so far.
choice_events_sent() {
    local total=0 url count
    for url in "$R0" "$R1"; do
        count="$(curl -sf "$url/sim/stats" | python3 -c 'import json, sys; print(json.load(sys.stdin)["choice_events_sent"])')"
        total=$((total + count))
    done
    echo "$total"
}

part_streams() {
    local streams=5000 tokens=32 speed=4
    [[ $QUICK -eq 1 ]] && { streams=1000; tokens=16; }
    ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
    start_fleet "$speed" --profile h20-tp8
    TARGETS=("direct=$R0,$R1")
    # Admission sized for the test: the defaults (512 in flight per replica, 1,024 queued
    # for 5 s) would answer most of 5,000 simultaneous streams with 429, as configured.
    LANEWAY_APPEND=$'[admission]\nmax_in_flight = 8192\nmax_in_flight_per_replica = 4096\nqueue_size = 1024'
    start_laneway
    LANEWAY_APPEND=""
    [[ -z "$LANEWAY_PID" ]] && { log "streams: laneway is not running, part skipped"; cleanup; return; }
    local idle_kb peak_kb sent_before sent_after
    idle_kb="$(awk '/VmRSS/ {print $2}' "/proc/$LANEWAY_PID/status")"
    # What the replicas handed out, to compare with what the clients received.
    sent_before="$(choice_events_sent)"
    echo -e "## Streams: $streams concurrent SSE streams (fleet speed x$speed)\n" >>"$OUT/results.md"
    bench "streams-c$streams" --workload "c${streams}_r${streams}_t${tokens}_i100" --rounds 1
    peak_kb="$(awk '/VmHWM/ {print $2}' "/proc/$LANEWAY_PID/status")"
    sent_after="$(choice_events_sent)"
    python3 "$PEERS_DIR/verdict.py" streams "$OUT/streams-c$streams.json" "$idle_kb" "$peak_kb" "$streams" \
        "$((sent_after - sent_before))"
    cleanup
}

# Writes the header of results.md; a later run of other parts on the same day appends.
describe_machine() {
    [[ -s "$OUT/results.md" ]] && { echo -e "\n---\n\nParts run later: \`benches/peers.sh ${*}\`\n" >>"$OUT/results.md"; return; }
    {
        echo "# laneway against its peers: $DATE$SUFFIX"
        echo
        echo "Run with \`benches/peers.sh ${*}\` on $(date -u '+%Y-%m-%d %H:%M UTC')."
        echo
        echo "| machine | |"
        echo "|---|---|"
        echo "| CPUs | $(nproc) ($(lscpu | sed -n 's/^Model name: *//p' | head -n1)) |"
        echo "| memory | $(free -h | awk '/^Mem:/ {print $2}') |"
        echo "| kernel | $(uname -sr) |"
        echo "| HAProxy | $(haproxy -v 2>/dev/null | head -n1 | awk '{print $3}') |"
        echo "| sglang-router | $("$VENV/bin/python" -m pip show sglang-router 2>/dev/null | sed -n 's/^Version: //p') |"
        echo "| vllm-router | $("$VENV/bin/python" -m pip show vllm-router 2>/dev/null | sed -n 's/^Version: //p') |"
        echo "| laneway | $(git -C "$ROOT" rev-parse --short HEAD) |"
        echo
        if real_only; then real_machine_notes; else
        echo "Pinning: ${PIN_PROXY[*]:-none} for the proxy under comparison, ${PIN_FLEET[*]:-none} for the simulated fleet and the load generator."
        echo "Targets are measured in interleaved rounds (A B C ... A B C ...), so machine noise falls on all alike."
        echo "Direct = the load generator's own round robin over both replicas, keep-alive, no proxy."
        fi
        echo
    } >"$OUT/results.md"
}

main() {
    install_tools
    [[ " ${PARTS[*]} " == " install " ]] && { log "installed"; return; }
    mkdir -p "$OUT"
    describe_machine "$@"
    local part
    for part in "${PARTS[@]}"; do
        case "$part" in
            install) ;;
            short) part_short ;;
            long) part_long ;;
            overhead) part_overhead ;;
            streams) part_streams ;;
            prefix) part_prefix ;;
            topologies) part_topologies ;;
            degraded) part_degraded ;;
            hetero) part_hetero ;;
            sweep) part_sweep ;;
            real-conv) part_real_conv ;;
            real-prefix) part_real_prefix ;;
            real-mixed) part_real_mixed ;;
            real-entries) part_real_entries ;;
        esac
    done
    real_only || python3 "$PEERS_DIR/verdict.py" targets "$OUT" | tee -a "$OUT/results.md"
    real_overview | tee -a "$OUT/results.md"
    log "done in $((SECONDS - STARTED_AT)) s: $OUT/results.md"
}

main "$@"
