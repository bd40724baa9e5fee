#!/usr/bin/env bash
# laneway with the answer gate opened wide: `serve --config FILE` gets the limit added.
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    if [[ "${args[$i]}" == --config ]]; then
        sed -i 's|^\[admission\]$|[admission]\nmax_unanswered_per_replica = 1048576|' "${args[$((i + 1))]}"
    fi
done
exec "${LANEWAY_UNGATED_BINARY:-/tmp/laneway-base}" "${args[@]}"
