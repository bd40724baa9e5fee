#!/usr/bin/env python3
"""The `topologies` part's table: each simulated topology's figures on the field's cases,
converted back to simulated time (the fleet ran SPEED times faster than real time), beside
the cells the field published for that topology and case.

    topologies_table.py OUT_DIR SPEED CASE...
"""
import json
import lzma
import os
import sys

# (case, topology) -> what the field published (field notes section 3, issue 17).
PUBLISHED = {
    ("1000/300/c6", "tp8x2"): "TTFT p50 2520 ms, TPOT 16.0 ms, P95 7.30 s, QPM 49.3 (keep-alive client)",
    ("9000/600/c2", "tp8x2"): "TTFT 224.9 ms, TPOT 14.3 ms, P95 8.79 s",
    ("9000/600/c2", "tp4x4"): "TTFT 967.7 ms, TPOT 16.3 ms",
    ("50000/1000/c1", "tp8x2"): "TTFT 353.4 ms, TPOT 14.4 ms, P95 14.77 s",
    ("50000/1000/c1", "tp4x4"): "TTFT 11128 ms, TPOT 16.0 ms",
    ("50000/1000/c1", "pp2tp8"): "TPM ~3% above TP4x4's",
    ("sweep", "tp8x2"): "1525.9 completion tok/s, P95 129.0 s (c1536_r3072_t128)",
    ("sweep", "pp2tp8"): "1528.6 completion tok/s, P95 98.2 s (c2048_r4096_t128)",
    ("sweep", "tp4x4"): "11866 completion tok/s, P95 25.19 s (c2048_r4096_t128)",
}


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def main():
    out, speed, cases = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    print("| case | topology | TTFT p50 ms | TPOT p50 ms | P95 E2E s | QPM | TPM | completion tok/s | failed | published |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for case in cases:
        path = os.path.join(out, case + ".json")
        if not os.path.exists(path):
            path += ".xz"
        if not os.path.exists(path):
            print(f"| {case} | (no result) | | | | | | | | |")
            continue
        run = load(path)
        key_case = "sweep" if run["workload"].startswith("c") else run["workload"]
        for target in run["targets"]:
            s = target["summary"]
            name = target["name"]
            cell = PUBLISHED.get((key_case, name), "-")
            print(
                f"| {run['workload']} | {name} | {s['ttft']['p50_ms'] * speed:.1f} | "
                f"{s['tpot']['p50_ms'] * speed:.2f} | {s['e2e']['p95_ms'] * speed / 1000:.2f} | "
                f"{s['qpm'] / speed:.1f} | {s['tpm'] / speed:.0f} | "
                f"{s['completion_tokens_per_s'] / speed:.1f} | {s['failures']} | {cell} |"
            )


if __name__ == "__main__":
    main()
