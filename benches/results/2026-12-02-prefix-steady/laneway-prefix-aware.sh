#!/bin/bash
# Runs $LANEWAY_BINARY (default: laneway on PATH) with `policy = "prefix_aware"` written
# into the config file given by --config, and with `[limits] store = $LW_STORE` appended
# when LW_STORE is set: the B side of benches/sweep_ab.sh, whose config names least_queue.
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    if [[ "${args[$i]}" == --config ]]; then
        file="${args[$((i + 1))]}"
        sed -i 's/^policy = .*/policy = "prefix_aware"/' "$file"
        [[ -n "${LW_STORE:-}" ]] && printf '[limits]\nstore = "%s"\n' "$LW_STORE" >>"$file"
    fi
done
exec "${LANEWAY_BINARY:-laneway}" "$@"
