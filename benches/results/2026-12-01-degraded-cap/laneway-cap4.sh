#!/usr/bin/env bash
# laneway with a per-replica in-flight cap of 4 and a long queue wait appended to its config.
args=("$@")
for i in "${!args[@]}"; do
  if [ "${args[$i]}" = "--config" ]; then
    f="${args[$((i+1))]}"
    cp "$f" "$f.cap"
    printf '\n[admission]\nmax_in_flight_per_replica = 4\nqueue_size = 4096\nqueue_timeout_ms = 60000\n' >> "$f.cap"
    args[$((i+1))]="$f.cap"
  fi
done
exec /tmp/laneway-gate8b "${args[@]}"
