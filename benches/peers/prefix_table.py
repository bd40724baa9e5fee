#!/usr/bin/env python3
"""Prints the `prefix` part's summary table (Markdown) from the JSON of its cases:
TTFT p50/p90/p95, total tokens/s, goodput and the reported cache hit ratio per target,
with laneway prefix_aware's ratios to the best peer.

  prefix_table.py OUT_DIR
"""
import glob
import json
import lzma
import os
import sys

PEERS = ("sglang-cache-aware", "vllm-cache-aware", "vllm-consistent-hash", "haproxy-rr-nd", "haproxy-hdr-nd")


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def main(out):
    paths = sorted(glob.glob(os.path.join(out, "prefix-*.json*")))
    paths = [p for p in paths if not p.endswith(".cpu.json")]
    print("### Prefix part: summary\n")
    for path in paths:
        case = os.path.basename(path).split(".json")[0]
        targets = load(path)["targets"]
        print(f"#### {case}\n")
        print("| target | ok | failed | TTFT p50 (ms) | TTFT p90 (ms) | TTFT p95 (ms) | total tok/s | goodput (req/s) | cache hit % |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        rows = {}
        for target in targets:
            s = target["summary"]
            hit = s.get("prefix_cache_hit_ratio")
            rows[target["name"]] = s
            print(
                f"| {target['name']} | {s['successes']} | {s['failures']} | {s['ttft']['p50_ms']:.0f} | "
                f"{s['ttft']['p90_ms']:.0f} | {s['ttft']['p95_ms']:.0f} | {s['total_tokens_per_s']:.0f} | "
                f"{(s.get('goodput_rps') or 0):.2f} | {'-' if hit is None else f'{hit * 100:.1f}'} |"
            )
        aware = rows.get("laneway-prefix")
        peers = [rows[name] for name in PEERS if name in rows]
        if aware and peers:
            best_p90 = min(p["ttft"]["p90_ms"] for p in peers)
            best_tput = max(p["total_tokens_per_s"] for p in peers)
            best_hit = max((p.get("prefix_cache_hit_ratio") or 0) for p in peers)
            print(
                f"\nlaneway-prefix against the best peer: TTFT p90 x{aware['ttft']['p90_ms'] / best_p90:.2f}, "
                f"throughput x{aware['total_tokens_per_s'] / best_tput:.2f}, "
                f"hit ratio {100 * (aware.get('prefix_cache_hit_ratio') or 0):.1f}% vs {100 * best_hit:.1f}%."
            )
        lq = rows.get("laneway-lq")
        if aware and lq:
            print(
                f"laneway-prefix against laneway-lq: TTFT p95 x{aware['ttft']['p95_ms'] / lq['ttft']['p95_ms']:.2f}, "
                f"throughput x{aware['total_tokens_per_s'] / lq['total_tokens_per_s']:.2f}."
            )
        print()


if __name__ == "__main__":
    main(sys.argv[1])
