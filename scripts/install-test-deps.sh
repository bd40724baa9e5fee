#!/usr/bin/env bash
# Installs the system packages the Rust tests use beyond cargo's crates: redis-server for the
# shared quota tests (tests/it/tenants_shared.rs, which skip without it). Debian or Ubuntu;
# run as root or with sudo. CI runs the same install from .ci/run.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    echo "redis-server: $(redis-server --version)"
    exit 0
fi
run() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
run apt-get update -qq
run apt-get install -y -qq redis-server >/dev/null
# The tests start their own servers on free ports; the packaged service is not needed.
if command -v systemctl >/dev/null 2>&1; then
    run systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
echo "redis-server: $(redis-server --version)"
