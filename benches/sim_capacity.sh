#!/usr/bin/env bash
# Capacity benchmark (not a test): one `laneway sim` process (release build) holding 2,000
# concurrent streaming requests. Reports errors, the sim's CPU seconds and peak RSS.
# Usage: benches/sim_capacity.sh [CONCURRENCY] [OUTPUT_TOKENS] [BUILT_IN_PROFILE] [SPEED]
# (default profile: benches/sim_capacity.toml at speed 1; e.g. `2000 128 h20-tp8 10` to see
# chunk coalescing at work on an overloaded replica)
set -euo pipefail
cd "$(dirname "$0")/.."
# Every stream is one connection on each side: raise the descriptor limit first.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
echo "fd limit: $(ulimit -n)"
export SIM_CAPACITY_CONCURRENCY="${1:-2000}"
export SIM_CAPACITY_OUTPUT_TOKENS="${2:-128}"
export SIM_CAPACITY_PROFILE="${3:-}"
export SIM_CAPACITY_SPEED="${4:-1}"
cargo bench --locked --bench sim_capacity
