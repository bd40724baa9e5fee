# The nginx stub replica and laneway's config in front of it, for benches/per_core.sh and
# benches/per_core/budget.sh. Sourced after peers/background.sh and peers/listening.sh, with
# ROOT and WORK set.

# start_stub [PREFIX...]: writes the stub's config and the stream it serves to the `sse`
# workload ($SSE_EVENTS token events, default 64, a usage event and [DONE]) into $WORK,
# starts nginx (behind PREFIX, e.g. `taskset -c 0`) and sets STUB_PORT and STUB.
start_stub() {
    STUB_PORT="$(free_port)"
    sed -e "s|@PORT@|$STUB_PORT|" -e "s|@WORK@|$WORK|" "$ROOT/benches/per_core/nginx.conf" >"$WORK/nginx.conf"
    python3 - "${SSE_EVENTS:-64}" >"$WORK/stream.sse" <<'PY'
import json, sys
events = int(sys.argv[1])
token = {"id": "cmpl-stub", "object": "text_completion",
         "choices": [{"index": 0, "text": "ok", "finish_reason": None}]}
usage = {"id": "cmpl-stub", "object": "text_completion", "choices": [],
         "usage": {"prompt_tokens": 4, "completion_tokens": events, "total_tokens": events + 4}}
line = lambda event: "data: " + json.dumps(event, separators=(",", ":")) + "\n\n"
sys.stdout.write(line(token) * events + line(usage) + "data: [DONE]\n\n")
PY
    # nginx's worker drops root: it must be able to read the stream (mktemp's directory is 0700).
    chmod 755 "$WORK" && chmod 644 "$WORK/stream.sse"
    "$@" nginx -c "$WORK/nginx.conf" -e "$WORK/nginx-error.log" &
    PIDS+=($!)
    STUB="http://127.0.0.1:$STUB_PORT"
}

# laneway_config FILE STRATEGY: benches/per_core/laneway.toml in front of the stub, with the
# short entry as STRATEGY.
laneway_config() {
    sed -e "s|@LISTEN@|127.0.0.1:0|" -e "s|@ADMIN@|127.0.0.1:0|" -e "s|@STUB@|$STUB|" \
        -e "s|@STRATEGY@|$2|" "$ROOT/benches/per_core/laneway.toml" >"$1"
}
