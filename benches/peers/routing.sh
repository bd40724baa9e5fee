# Parts `degraded`, `hetero` and `sweep` of benches/peers.sh (sourced by it): balancing on
# fleets where counting requests is not enough. Every peer in its best configuration:
# HAProxy leastconn + httpclose + http-no-delay and round-robin keep-alive + no-delay,
# sglang-router and vllm-router power_of_two, laneway least_queue and predicted_latency (and on
# hetero predicted_latency with the long entry bound to the TP8 replicas, as config/hetero.toml).
#
# degraded: four h20-tp8 replicas, one slowed 3x, a 70% 1000/300 + 30% 9000/600 Poisson
#           open loop at two loads (ROUTING_RATES, req/s wall clock).
# hetero:   two h20-tp8 and two h20-tp4 replicas, the same mix at two loads
#           (ROUTING_HETERO_RATES).
# sweep:    two h20-tp8 replicas, c128_r256_t64 and c256_r512_t64.
#
# The fleet runs at ROUTING_SPEED (2); goodput counts requests with TTFT <= 1 s and
# TPOT <= 50 ms in simulated time, i.e. 500 ms and 25 ms on the wall clock at speed 2,
# and laneway's entries are given that SLO. ROUTING_BASELINE=BINARY adds that build's
# predicted_latency (or ROUTING_BASELINE_POLICY) as one more target (a before/after in the
# same run).

ROUTING_SPEED="${ROUTING_SPEED:-2}"
# The issue's two load points: the best peer's goodput near 85% and near 60% (HAProxy
# leastconn read 0.80-0.92 at 2.5-2.8 req/s and 0.58-0.65 at 4 on the reference machine).
ROUTING_RATES="${ROUTING_RATES:-2.8 4}"
ROUTING_HETERO_RATES="${ROUTING_HETERO_RATES:-3 6}"
# Per case, over three rounds: at 80 a round, one Poisson burst costs a round fewer points.
ROUTING_REQUESTS="${ROUTING_REQUESTS:-240}"
ROUTING_MIX="1000/300:7+9000/600:3"
# The long entry's connection strategy in laneway's configuration (the default's).
ROUTING_LONG_STRATEGY="${ROUTING_LONG_STRATEGY:-force_close}"
# Every target is sent the same prompts (same seed), one after another on one fleet: with
# prefix caching on, a target would find the prompts the previous targets left in cache on
# whichever replica it picks, and the first target of each round none. Off by default so
# that placement, not cache luck, is measured.
ROUTING_SIM_FLAGS="${ROUTING_SIM_FLAGS---no-enable-prefix-caching}"

# routing_slo_ms SIM_MS: the wall-clock milliseconds of SIM_MS simulated ones.
routing_slo_ms() { python3 -c "print(max(1, round($1 / $ROUTING_SPEED)))"; }

# start_fleet_of PROFILE...: one `laneway sim` (4 API workers) per profile; FLEET holds
# their URLs in order.
FLEET=()
start_fleet_of() {
    local index=0 profile url
    FLEET=()
    for profile in "$@"; do
        "${PIN_FLEET[@]}" "$LANEWAY" sim --port 0 --profile "$profile" --api-workers 4 \
            --speed "$ROUTING_SPEED" --id "r$index" --seed "$((index + 1))" $ROUTING_SIM_FLAGS \
            >"$WORK/sim-r$index.out" 2>"$WORK/sim-r$index.err" &
        PIDS+=($!)
        url="$(listening_url "$WORK/sim-r$index.out")"
        FLEET+=("$url")
        index=$((index + 1))
    done
    log "fleet ($*, speed $ROUTING_SPEED): ${FLEET[*]}"
}

# slow_replica URL FACTOR: every engine step of that replica takes FACTOR times longer.
slow_replica() {
    curl -sf -X POST "$1/sim/fault" -H 'content-type: application/json' \
        -d "{\"mode\":\"slow\",\"factor\":$2}" >/dev/null
}

# start_laneway_fleet NAME POLICY [BINARY [EXTRA]]: laneway (the tree's build, or BINARY) in
# front of FLEET with the bench SLO; EXTRA is appended to its configuration.
start_laneway_fleet() {
    local name="$1" policy="$2" binary="${3:-$LANEWAY}" extra="${4:-}" port admin config index=0 url ttft tpot
    port="$(free_port)"
    admin="$(free_port)"
    config="$WORK/$name.toml"
    ttft="$(routing_slo_ms 1000)"
    tpot="$(routing_slo_ms 50)"
    {
        echo "listen = \"127.0.0.1:$port\""
        echo "admin_listen = \"127.0.0.1:$admin\""
        echo "policy = \"$policy\""
        echo "[entries.short]"
        echo "strategy = \"force_close\""
        echo "slo = { ttft_ms = $ttft, tpot_ms = $tpot }"
        echo "[entries.long]"
        echo "strategy = \"$ROUTING_LONG_STRATEGY\""
        echo "slo = { ttft_ms = $ttft, tpot_ms = $tpot }"
        for url in "${FLEET[@]}"; do
            echo "[[replicas]]"
            echo "name = \"r$index\""
            echo "url = \"$url\""
            index=$((index + 1))
        done
        echo "$extra"
        if [[ "$binary" == "$LANEWAY" ]]; then printf '%b\n' "$LANEWAY_EXTRA_CONFIG"; fi
    } >"$config"
    "${PIN_PROXY[@]}" "$binary" serve --config "$config" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=($!)
    register_target "$name" "http://127.0.0.1:$port" "http://127.0.0.1:$admin/health" 30 "$WORK/$name.err"
    if [[ -n "${ROUTING_ESTIMATES_EVERY:-}" ]]; then poll_estimates "$name" "$admin"; fi
}

# poll_estimates NAME ADMIN_PORT: with ROUTING_ESTIMATES_EVERY=SECONDS, what the gateway has
# learned of each replica (`GET /admin/replicas`) and its hedge, rescue and hold counters,
# one JSON line per poll into OUT/estimates-NAME.jsonl, for reading how its estimates move
# over a run.
poll_estimates() {
    local name="$1" admin="$2"
    (
        local polls=0
        while ((polls < 10000)); do
            printf '{"t":%s,"view":%s,"counters":"%s"}\n' "$(date +%s.%N)" \
                "$(curl -sf "http://127.0.0.1:$admin/admin/replicas" || echo null)" \
                "$(curl -sf "http://127.0.0.1:$admin/metrics" |
                    grep -E '^laneway_(hedges|saturation_holds)_total' | tr '\n"' ' \047')"
            polls=$((polls + 1))
            sleep "$ROUTING_ESTIMATES_EVERY"
        done
    ) >>"$OUT/estimates-$name.jsonl" &
    PIDS+=($!)
}

# ROUTING_PEERS: which targets to start, by name (default all of them), for quicker
# iterations; a committed result runs them all.
# laneway-default (not in the default list): the default policy, prefix_latency (the
# sim's prompts share no prefix and its cache is off, so its latency half decides).
# laneway-predicted-pools (hetero only): predicted_latency with the long entry bound to TP8;
# laneway-predicted-split (hetero only, not in the default list): also the short entry
# bound to TP4.
ROUTING_PEERS="${ROUTING_PEERS:-laneway-predicted laneway-predicted-pools laneway-least-queue laneway-baseline haproxy-lc-close-nd haproxy-rr-nd sglang vllm}"
routing_peer() { [[ " $ROUTING_PEERS " == *" $1 "* ]]; }

start_routing_peers() {
    TARGETS=()
    routing_peer laneway-default && start_laneway_fleet laneway-default prefix_latency
    routing_peer laneway-predicted && start_laneway_fleet laneway-predicted predicted_latency
    routing_peer laneway-least-queue && start_laneway_fleet laneway-least-queue least_queue
    # ROUTING_BASELINE=BINARY: that build's predicted_latency too, for a before/after.
    local baseline_policy="${ROUTING_BASELINE_POLICY:-predicted_latency}"
    [[ -n "${ROUTING_BASELINE:-}" ]] && routing_peer laneway-baseline &&
        start_laneway_fleet "laneway-baseline-${baseline_policy//_/-}" "$baseline_policy" \
            "$ROUTING_BASELINE"
    routing_peer haproxy-lc-close-nd &&
        start_haproxy_on haproxy-lc-close-nd leastconn close nodelay "${FLEET[@]}"
    routing_peer haproxy-rr-nd &&
        start_haproxy_on haproxy-rr-nd roundrobin keepalive nodelay "${FLEET[@]}"
    routing_peer sglang && start_router_on sglang power_of_two "${FLEET[@]}"
    routing_peer vllm && start_router_on vllm power_of_two "${FLEET[@]}"
    log "targets: ${TARGETS[*]}"
}

# routing_mix CASE RATE: the mixed open loop, three interleaved rounds, goodput per target
# and its spread over the rounds.
routing_mix() {
    local case_name="$1" rate="$2" ttft tpot
    ttft="$(routing_slo_ms 1000)"
    tpot="$(routing_slo_ms 50)"
    bench "$case_name" --workload "$ROUTING_MIX" --rate "$rate" --requests "$ROUTING_REQUESTS" \
        --rounds 3 --seed 12 --goodput "ttft:$ttft" "tpot:$tpot" >/dev/null
    python3 "$PEERS_DIR/goodput_share.py" "$OUT/$case_name.json.xz" "$ttft" "$tpot" \
        | tee -a "$OUT/results.md"
    # Whether the misses were placement's or the fleet's capacity.
    python3 "$PEERS_DIR/placement.py" "$OUT/$case_name.json.xz" "$ttft" "$tpot" --summary \
        | tee -a "$OUT/results.md"
}

part_degraded() {
    start_fleet_of h20-tp8 h20-tp8 h20-tp8 h20-tp8
    slow_replica "${FLEET[0]}" 3
    start_routing_peers
    echo -e "## Degraded: 4 x h20-tp8, r0 slowed 3x, mixed open loop (speed x$ROUTING_SPEED)\n" >>"$OUT/results.md"
    local rate
    for rate in $ROUTING_RATES; do
        routing_mix "degraded-r$rate" "$rate"
    done
    cleanup
}

# laneway's configuration for a mixed fleet (config/hetero.toml): the long entry bound to
# the TP8 replicas, where a 9000-token prompt prefills 4x faster; the short entry on all.
HETERO_POOLS="[[pools]]
name = \"tp8\"
replicas = [\"r0\", \"r1\"]
[[entries.long.variants]]
name = \"tp8\"
strategy = \"$ROUTING_LONG_STRATEGY\"
pool = \"tp8\"
weight = 1"

# The same, and the short entry bound to the TP4 replicas (config/hetero.toml's comment
# names both bindings): long prompts' prefill then never shares a step with short ones.
HETERO_SPLIT="$HETERO_POOLS
[[pools]]
name = \"tp4\"
replicas = [\"r2\", \"r3\"]
[[entries.short.variants]]
name = \"tp4\"
strategy = \"force_close\"
pool = \"tp4\"
weight = 1"

part_hetero() {
    start_fleet_of h20-tp8 h20-tp8 h20-tp4 h20-tp4
    start_routing_peers
    if routing_peer laneway-predicted-pools; then
        start_laneway_fleet laneway-predicted-pools predicted_latency "$LANEWAY" "$HETERO_POOLS"
    fi
    # With ROUTING_BASELINE, that build with the same binding too, for a before/after.
    if [[ -n "${ROUTING_BASELINE:-}" ]] && routing_peer laneway-predicted-pools; then
        start_laneway_fleet laneway-predicted-pools-baseline predicted_latency \
            "$ROUTING_BASELINE" "$HETERO_POOLS"
    fi
    if routing_peer laneway-predicted-split; then
        start_laneway_fleet laneway-predicted-split predicted_latency "$LANEWAY" "$HETERO_SPLIT"
    fi
    log "targets: ${TARGETS[*]}"
    echo -e "## Heterogeneous: 2 x h20-tp8 + 2 x h20-tp4, mixed open loop (speed x$ROUTING_SPEED)\n" >>"$OUT/results.md"
    local rate
    for rate in $ROUTING_HETERO_RATES; do
        routing_mix "hetero-r$rate" "$rate"
    done
    cleanup
}

part_sweep() {
    start_fleet_of h20-tp8 h20-tp8
    start_routing_peers
    echo -e "## Sweep: 2 x h20-tp8 (speed x$ROUTING_SPEED)\n" >>"$OUT/results.md"
    bench sweep-c128_r256_t64 --workload c128_r256_t64 --rounds 3 >/dev/null
    bench sweep-c256_r512_t64 --workload c256_r512_t64 --rounds 3 >/dev/null
    cleanup
}
