# Part `prefix` of benches/peers.sh (sourced by it): prefix-cache and session-aware routing
# on a TP4x4 fleet (four `laneway sim --api-workers 4` replicas of the h20-tp4 profile with
# an 80,000-token KV cache, benches/peers/h20-tp4-80k.toml; two per node), prefix caching
# on as in vLLM. Each target gets a fleet of its own, started cold: a cache warmed by one
# target's requests must not serve another's (its rounds share its fleet, as production
# traffic would). PREFIX_PROFILE=h20-tp4 runs the built-in 500,000-token cache instead,
# which holds every workload's contexts, so that placement barely changes the hit ratio.
#
# Targets: laneway `prefix_aware` and `least_queue`; sglang-router and vllm-router
# `cache_aware`; vllm-router `consistent_hash`; HAProxy `roundrobin` and
# `balance hdr(x-session-id)` (both with http-no-delay, HAProxy at its best).
# Workloads (seeded, the same bytes for every target), three interleaved rounds each:
#   shared-prefix groups near saturation  sp_g24_p4000_q400_o64, 48 clients, 960 requests
#     (40 per group: the 24 misses no router avoids, one per group, are 2.5% of the run and
#     it measures the steady state; at 240 they were 10% and the cold start set TTFT p90)
#   multi-turn conversations              mt_c16_t6_i300_o64 (x-session-id and `user`)
#   one hot prefix carrying half          hot_p4000_q400_o64_h50, 48 clients
# Reported per target: TTFT p50/p90/p95, throughput, goodput and the replicas' reported
# cache hit ratio (usage.prompt_tokens_details.cached_tokens over prompt tokens), by
# benches/peers/prefix_table.py from the JSON of each case.
# PREFIX_WORKLOADS picks among `sp mt hot` (default all three); PREFIX_BASELINE=BINARY adds
# that build's `prefix_aware` as one more target (a before/after in the same run), named
# `laneway-prefix-baseline`; several binaries, space-separated, add one target each, named
# `laneway-prefix-` and the binary's file name. PREFIX_POLICY (default `prefix_aware`) is the
# policy of laneway-prefix and its baselines, e.g. `prefix_latency`, the default policy.

# PREFIX_PEERS picks the other targets among `lq sglang vllm-ca vllm-ch hr hh` (default all);
# PREFIX_SCALE=N runs N times the requests of each case (longer runs: less of each is cold);
# PREFIX_CLIENTS sets the shared-prefix and hot-prefix cases' concurrency (default 48).
# PREFIX_SP_GROUPS sets the shared-prefix case's group count (default 24: 96,000 context
# tokens, over one replica's 80,000-token cache and under a third of the fleet's; at 48 the
# contexts fit the fleet's caches only if each group keeps to one or two replicas).

PREFIX_PROFILE="${PREFIX_PROFILE:-h20-tp4-80k}"
PREFIX_PEERS="${PREFIX_PEERS:-lq sglang vllm-ca vllm-ch hr hh}"
PREFIX_SCALE="${PREFIX_SCALE:-1}"
PREFIX_CLIENTS="${PREFIX_CLIENTS:-48}"
PREFIX_SP_GROUPS="${PREFIX_SP_GROUPS:-24}"
PREFIX_WORKLOADS="${PREFIX_WORKLOADS:-sp mt hot}"
PREFIX_BASELINE="${PREFIX_BASELINE:-}"
PREFIX_POLICY="${PREFIX_POLICY:-prefix_aware}"

# start_fleet_tp4x4 SPEED FLEET_NAME: four replicas; sets FLEET4 to their URLs.
start_fleet_tp4x4() {
    local speed="$1" fleet="$2" id profile=(--profile "$PREFIX_PROFILE")
    [[ "$PREFIX_PROFILE" == h20-tp4-80k ]] && profile=(--config "$PEERS_DIR/h20-tp4-80k.toml")
    FLEET4=()
    for id in r0 r1 r2 r3; do
        "${PIN_FLEET[@]}" "$LANEWAY" sim --port 0 "${profile[@]}" --api-workers 4 --speed "$speed" \
            --id "$fleet-$id" >"$WORK/sim-$fleet-$id.out" 2>"$WORK/sim-$fleet-$id.err" &
        PIDS+=($!)
    done
    for id in r0 r1 r2 r3; do FLEET4+=("$(listening_url "$WORK/sim-$fleet-$id.out")"); done
}

# start_laneway_tp4x4 NAME POLICY [BINARY]: laneway (the build under test unless BINARY)
# with the published defaults and POLICY.
start_laneway_tp4x4() {
    local name="$1" policy="$2" binary="${3:-$LANEWAY}" port admin config i nodes=(h20-node-1 h20-node-1 h20-node-2 h20-node-2)
    port="$(free_port)"
    admin="$(free_port)"
    config="$WORK/$name.toml"
    {
        echo "listen = \"127.0.0.1:$port\""
        echo "admin_listen = \"127.0.0.1:$admin\""
        echo "policy = \"$policy\""
        for i in 0 1 2 3; do
            printf '[[replicas]]\nname = "tp4-%s"\nurl = "%s"\nnode = "%s"\n' "$i" "${FLEET4[$i]}" "${nodes[$i]}"
        done
        if [[ "$binary" == "$LANEWAY" ]]; then printf '%b\n' "$LANEWAY_EXTRA_CONFIG"; fi
    } >"$config"
    "${PIN_PROXY[@]}" "$binary" serve --config "$config" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=($!)
    register_target "$name" "http://127.0.0.1:$port" "http://127.0.0.1:$admin/health" 30 "$WORK/$name.err"
}

# start_prefix_peers SPEED: every target, each in front of a cold fleet of its own.
start_prefix_peers() {
    local speed="$1"
    TARGETS=()
    start_fleet_tp4x4 "$speed" lp; start_laneway_tp4x4 laneway-prefix "$PREFIX_POLICY"
    local baselines=($PREFIX_BASELINE) binary name n=0
    for binary in "${baselines[@]}"; do
        name=laneway-prefix-baseline
        [[ ${#baselines[@]} -gt 1 ]] && name="laneway-prefix-$(basename "$binary")"
        start_fleet_tp4x4 "$speed" "lb$n"
        start_laneway_tp4x4 "$name" "$PREFIX_POLICY" "$binary"
        n=$((n + 1))
    done
    local peer
    for peer in $PREFIX_PEERS; do
        start_fleet_tp4x4 "$speed" "$peer"
        case "$peer" in
            lq) start_laneway_tp4x4 laneway-lq least_queue ;;
            sglang) start_router_on sglang cache_aware "${FLEET4[@]}" ;;
            vllm-ca) start_router_on vllm cache_aware "${FLEET4[@]}" ;;
            vllm-ch) start_router_on vllm consistent_hash "${FLEET4[@]}" ;;
            hr) start_haproxy_on haproxy-rr-nd roundrobin keepalive nodelay "${FLEET4[@]}" ;;
            hh) start_haproxy_on haproxy-hdr-nd "hdr(x-session-id)" keepalive nodelay "${FLEET4[@]}" ;;
            *) log "PREFIX_PEERS: unknown peer $peer"; exit 2 ;;
        esac
    done
    log "targets (fleets: $PREFIX_PROFILE, speed $speed): ${TARGETS[*]}"
}

part_prefix() {
    # Clock x2 keeps the part within its time; the SLOs below are wall time, i.e. TTFT
    # 2 s and TPOT 50 ms of simulated time.
    local speed=2 sp=960 mt=288 hot=240 clients="$PREFIX_CLIENTS"
    [[ $QUICK -eq 1 ]] && { speed=4; sp=96; mt=96; hot=96; clients=32; }
    sp=$((sp * PREFIX_SCALE)); mt=$((mt * PREFIX_SCALE)); hot=$((hot * PREFIX_SCALE))
    local slo=(--goodput ttft:1000 tpot:25)
    {
        echo -e "## Prefix-cache and session-aware routing (TP4x4, $PREFIX_PROFILE, fleet speed x$speed)\n"
        echo -e "Each target in front of a cold fleet of its own. Goodput SLO (wall time): ttft <= 1000 ms, tpot <= 25 ms (simulated: 2 s, 50 ms).\n"
    } >>"$OUT/results.md"
    if [[ " $PREFIX_WORKLOADS " == *" sp "* ]]; then
        start_prefix_peers "$speed"
        local groups="$PREFIX_SP_GROUPS"
        bench "prefix-sp-g$groups-p4000-q400" --workload "sp_g${groups}_p4000_q400_o64_c$clients" \
            --requests "$sp" "${slo[@]}"
        cleanup
    fi
    if [[ " $PREFIX_WORKLOADS " == *" mt "* ]]; then
        start_prefix_peers "$speed"
        bench prefix-mt-c16-t6-i300 --workload mt_c16_t6_i300_o64 --requests "$mt" "${slo[@]}"
        cleanup
    fi
    if [[ " $PREFIX_WORKLOADS " == *" hot "* ]]; then
        start_prefix_peers "$speed"
        bench prefix-hot-p4000-q400-h50 --workload "hot_p4000_q400_o64_h50_c$clients" --requests "$hot" "${slo[@]}"
        cleanup
    fi
    python3 "$PEERS_DIR/prefix_table.py" "$OUT" | tee -a "$OUT/results.md"
}
