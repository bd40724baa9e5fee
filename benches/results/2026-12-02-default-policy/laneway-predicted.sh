#!/usr/bin/env bash
# laneway (LANEWAY_BINARY) with policy = "predicted_latency" in the config given with --config.
args=("$@")
for i in "${!args[@]}"; do
  if [ "${args[$i]}" = "--config" ]; then
    f="${args[$((i+1))]}"
    sed 's/^policy = .*/policy = "predicted_latency"/' "$f" >"$f.predicted"
    args[$((i+1))]="$f.predicted"
  fi
done
exec "${LANEWAY_BINARY:?}" "${args[@]}"
