# The `topologies` part of benches/peers.sh (sourced by it): the field's three business
# cases and a short-output sweep on each simulated topology, direct (the load generator's
# own round robin over a topology's replicas), printed beside the published cells.
#
#   tp8x2       two `h20-tp8` replicas (one H20x8 node each)
#   tp4x4       four `h20-tp4` replicas (four GPUs each)
#   pp2tp8      one `h20-pp2tp8` replica (a pipeline over two nodes, TCP between them)
#   tp16-erdma  one `h20-tp16-erdma` replica (TP16 over two nodes, eRDMA between them)
#
# Every replica has 4 API workers. The fleets run SPEED times faster than real time;
# topologies_table.py converts the figures back to simulated time.

# start_topology NAME PROFILE COUNT SPEED: starts COUNT replicas of PROFILE; appends
# NAME=URL,URL... to TARGETS.
start_topology() {
    local name="$1" profile="$2" count="$3" speed="$4" index urls=()
    for ((index = 0; index < count; index++)); do
        "${PIN_FLEET[@]}" "$LANEWAY" sim --port 0 --profile "$profile" --api-workers 4 \
            --speed "$speed" --id "$name-$index" >"$WORK/sim-$name-$index.out" \
            2>"$WORK/sim-$name-$index.err" &
        PIDS+=($!)
        urls+=("$(listening_url "$WORK/sim-$name-$index.out")")
    done
    local joined
    joined="$(IFS=,; echo "${urls[*]}")"
    TARGETS+=("$name=$joined")
    log "topology $name ($count x $profile, speed $speed): $joined"
}

start_topologies() {
    TARGETS=()
    start_topology tp8x2 h20-tp8 2 "$1"
    start_topology tp4x4 h20-tp4 4 "$1"
    start_topology pp2tp8 h20-pp2tp8 1 "$1"
    start_topology tp16-erdma h20-tp16-erdma 1 "$1"
}

part_topologies() {
    local speed=4 short=18 r9k=6 r50k=2 sweep="c2048_r4096_t128" sweep_speed=4
    [[ $QUICK -eq 1 ]] && { speed=8; short=6; r9k=2; r50k=1; sweep="c256_r512_t128"; sweep_speed=8; }
    start_topologies "$speed"
    echo -e "## Topologies: the field's cases (fleet speed x$speed)\n" >>"$OUT/results.md"
    bench topo-1000-300-c6 --workload 1000/300/c6 --requests "$short" --rounds 1
    bench topo-9000-600-c2 --workload 9000/600/c2 --requests "$r9k" --rounds 1
    bench topo-50000-1000-c1 --workload 50000/1000/c1 --requests "$r50k" --rounds 1
    {
        echo -e "### Beside the published cells (simulated time)\n"
        python3 "$PEERS_DIR/topologies_table.py" "$OUT" "$speed" \
            topo-1000-300-c6 topo-9000-600-c2 topo-50000-1000-c1
        echo
    } | tee -a "$OUT/results.md"
    cleanup
    start_topologies "$sweep_speed"
    echo -e "## Topologies: short-output sweep (fleet speed x$sweep_speed)\n" >>"$OUT/results.md"
    bench "topo-sweep-$sweep" --workload "$sweep" --rounds 1
    {
        echo -e "### Beside the published cells (simulated time)\n"
        python3 "$PEERS_DIR/topologies_table.py" "$OUT" "$sweep_speed" "topo-sweep-$sweep"
        echo
    } | tee -a "$OUT/results.md"
    cleanup
}
