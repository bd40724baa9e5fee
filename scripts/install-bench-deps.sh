#!/usr/bin/env bash
# Installs the Debian packages the benchmarks use beside laneway: haproxy (the peer measured
# in benches/peers.sh and benches/per_core.sh), nginx (the stub replica of per_core.sh) and
# wrk (its independent load generator). Run as root or with sudo. The packaged services are
# not needed: the scripts start their own processes on loopback.
set -euo pipefail
missing=()
for pair in haproxy:haproxy nginx:nginx wrk:wrk; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
done
run() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ((${#missing[@]})); then
    run apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 \
        || { run apt-get update -qq && run apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi
if command -v systemctl >/dev/null 2>&1; then
    for service in haproxy nginx; do run systemctl disable --now "$service" >/dev/null 2>&1 || true; done
fi
echo "haproxy: $(haproxy -v | head -n1)"
echo "nginx: $(nginx -v 2>&1)"
echo "wrk: $(wrk -v 2>&1 | head -n1)"
