#!/usr/bin/env bash
# Capacity benchmark (not a test): one `laneway sim` process (release build) holding 2,000
# concurrent streaming requests. Reports errors, the sim's CPU seconds and peak RSS.
# Usage: benches/sim_capacity.sh [CONCURRENCY] [OUTPUT_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
# Every stream is one connection on each side: raise the descriptor limit first.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
echo "fd limit: $(ulimit -n)"
export SIM_CAPACITY_CONCURRENCY="${1:-2000}"
export SIM_CAPACITY_OUTPUT_TOKENS="${2:-128}"
cargo bench --locked --bench sim_capacity
