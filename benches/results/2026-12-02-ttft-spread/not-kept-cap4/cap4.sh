#!/usr/bin/env bash
if [[ "$1" == serve ]]; then
  cfg="$3"; new="$cfg.cap4.toml"
  cp "$cfg" "$new"; printf '%s\n' "[admission]
max_in_flight_per_replica = 4
queue_size = 1000" >> "$new"
  exec "/tmp/exp/lw-main" serve --config "$new" "${@:4}"
fi
exec "/tmp/exp/lw-main" "$@"
