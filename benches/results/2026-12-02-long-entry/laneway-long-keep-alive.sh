#!/usr/bin/env bash
# laneway (LANEWAY_BINARY) with its long entry on keep-alive connections: the config given
# with --config is copied with the long entry's strategy set to "keep_alive".
args=("$@")
for i in "${!args[@]}"; do
  if [ "${args[$i]}" = "--config" ]; then
    f="${args[$((i+1))]}"
    awk '/^\[entries.long\]/ { long = 1 } /^\[/ && !/^\[entries.long\]/ { long = 0 }
         long && /^strategy = / { print "strategy = \"keep_alive\""; next } { print }' "$f" >"$f.keep-alive"
    args[$((i+1))]="$f.keep-alive"
  fi
done
exec "${LANEWAY_BINARY:?}" "${args[@]}"
