#!/usr/bin/env python3
"""Per round and per target of a `laneway bench` JSON (plain or .xz): requests, misses
(no cached token), TTFT p50/p90 of all, of hits and of misses, mean e2e; then per replica
the requests each API process served (`x-sim-api-worker`), and over the rounds after the
first, how many streams shared a stream's API process at its decode's midpoint.

    python3 benches/peers/prefix_rounds.py RESULTS/prefix-sp-g24-p4000-q400.json.xz
"""
import collections
import json
import lzma
import statistics
import sys


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


def main(path):
    data = load(path)
    for target in data["targets"]:
        ok = [r for r in target["records"] if r["outcome"]["kind"] == "success"]
        print(f"== {target['name']}: {len(ok)} successes")
        for rnd in sorted({r["round"] for r in ok}):
            rr = [r for r in ok if r["round"] == rnd]
            ms = lambda rs: [r["ttft"] / 1000 for r in rs]
            hits = ms(r for r in rr if r["cached_tokens"] > 0)
            misses = ms(r for r in rr if r["cached_tokens"] == 0)
            every = ms(rr)
            e2e = statistics.mean(r["e2e"] / 1000 for r in rr)
            print(f"  round {rnd}: {len(rr)} requests, {len(misses)} misses; TTFT p50 "
                  f"{pct(every, 50):.0f} p90 {pct(every, 90):.0f} ms; hits p50 "
                  f"{pct(hits, 50):.0f} p90 {pct(hits, 90):.0f}; misses p50 "
                  f"{pct(misses, 50):.0f}; mean e2e {e2e:.0f} ms")
        served = collections.Counter((r["replica"], r.get("api_worker")) for r in ok)
        for replica in sorted({r["replica"] for r in ok}):
            workers = sorted(w for (rep, w) in served if rep == replica and w is not None)
            counts = [served[(replica, w)] for w in workers]
            print(f"  {replica}: {sum(counts)} requests, per API process {counts}")
        # Rounds run at different times: count overlaps within one round only.
        shared = []
        for r in (r for r in ok if r["round"] > 0):
            mid = r["sent_at"] + r["ttft"] + (r["e2e"] - r["ttft"]) / 2
            shared.append(sum(
                1 for o in ok
                if o["round"] == r["round"] and o["replica"] == r["replica"]
                and o.get("api_worker") == r.get("api_worker")
                and o["sent_at"] <= mid <= o["sent_at"] + o["e2e"]))
        if shared:
            print(f"  streams sharing an API process (warm rounds): mean "
                  f"{statistics.mean(shared):.1f}, p90 {pct(shared, 90)}")


if __name__ == "__main__":
    main(sys.argv[1])
