#!/usr/bin/env bash
if [[ "$1" == serve ]]; then
  cfg="$3"; new="$cfg.nohedge.toml"
  cp "$cfg" "$new"; printf '%s\n' "[entries.short]
strategy = 'force_close'
slo = { ttft_ms = 1000, tpot_ms = 50, hedge_percent = 0 }
[entries.long]
strategy = 'force_close'
slo = { ttft_ms = 1000, tpot_ms = 50, hedge_percent = 0 }" >> "$new"
  exec "/tmp/exp/lw-main" serve --config "$new" "${@:4}"
fi
exec "/tmp/exp/lw-main" "$@"
