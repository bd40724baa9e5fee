"""Where each target placed its requests, and what that did to them, from `laneway bench`
records that name the replica and the simulator's API process (`replica`, `api_worker`).

    placement.py RESULTS.json[.xz] TTFT_MS TPOT_MS

Per target: each replica's share of the requests and its SLO misses, then TTFT misses of the
requests by how many other streams were open on the same API process when they were sent
(the simulator's API processes slow a new request's preprocessing by the output work they
carry). SLOs in wall-clock milliseconds, as the bench was run.
"""

import json
import lzma
import sys
from collections import Counter, defaultdict


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def tpot_ms(record):
    if record.get("ttft") is None or record["output_tokens"] < 2:
        return None
    return (record["e2e"] - record["ttft"]) / (record["output_tokens"] - 1) / 1000


def main():
    path, ttft_slo, tpot_slo = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    results = load(path)
    for target in results["targets"]:
        records = [r for r in target["records"] if r.get("replica") is not None]
        if not records:
            print(f"{target['name']}: no record names its replica\n")
            continue
        print(f"### {target['name']}\n")
        by_replica = defaultdict(Counter)
        for record in records:
            ttft = record.get("ttft")
            tpot = tpot_ms(record)
            row = by_replica[record["replica"]]
            row["requests"] += 1
            row["ttft miss"] += ttft is None or ttft / 1000 > ttft_slo
            row["tpot miss"] += tpot is not None and tpot > tpot_slo
        print("| replica | requests | TTFT misses | TPOT misses |")
        print("|---|---:|---:|---:|")
        for replica in sorted(by_replica):
            row = by_replica[replica]
            print(f"| {replica} | {row['requests']} | {row['ttft miss']} | {row['tpot miss']} |")
        # Streams open on the same API process when each request was sent (same round).
        by_worker = defaultdict(list)
        for record in records:
            key = (record["round"], record["replica"], record.get("api_worker"))
            by_worker[key].append(record)
        sharing = defaultdict(Counter)
        for group in by_worker.values():
            for record in group:
                sent = record["sent_at"]
                open_streams = sum(
                    1 for other in group
                    if other is not record and other["sent_at"] <= sent < other["sent_at"] + other["e2e"]
                )
                bucket = min(open_streams, 3)
                ttft = record.get("ttft")
                row = sharing[(record["prompt_tokens"], bucket)]
                row["requests"] += 1
                row["ttft miss"] += ttft is None or ttft / 1000 > ttft_slo
        print("\n| prompt tokens | other streams on its API process | requests | TTFT misses |")
        print("|---:|---:|---:|---:|")
        for (prompt, bucket) in sorted(sharing):
            row = sharing[(prompt, bucket)]
            label = "3+" if bucket == 3 else str(bucket)
            print(f"| {prompt} | {label} | {row['requests']} | {row['ttft miss']} |")
        print()


if __name__ == "__main__":
    main()
