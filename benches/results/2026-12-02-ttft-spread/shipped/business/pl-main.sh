#!/usr/bin/env bash
# laneway-main with the default policy (predicted_latency) instead of sweep_ab.sh's least_queue.
if [[ "$1" == serve ]]; then
  new="$3.pl.toml"
  sed 's/^policy = "least_queue"/policy = "predicted_latency"/' "$3" > "$new"
  exec /tmp/exp/lw-main serve --config "$new" "${@:4}"
fi
exec /tmp/exp/lw-main "$@"
