#!/usr/bin/env python3
"""Where TTFT misses come from on a fleet of several-API-process sims, from a `laneway bench
--json` file (plain or .xz): for each target, the requests counted by whether their replica
had an API process with no other stream when they were sent ("free>0") or none ("free=0"),
whether they ended up sharing their process with another stream ("shared") or not
("alone"), and whether their first token missed TTFT_MS ("miss") or not ("ok").

Streams are the target's own requests in the same round (sent_at to sent_at + e2e, as the
client saw them); the process is the `x-sim-api-worker` the response named. A request that
found a free process and still shared one lost the sim's accept race (a streaming process is
idle between two events and may take a fresh connection); one that found none had nowhere
to go on that replica.

    api_sharing.py RESULTS.json[.xz] TTFT_MS [API_WORKERS (4)]
"""
import collections
import json
import lzma
import sys


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def main():
    data, ttft_us = load(sys.argv[1]), float(sys.argv[2]) * 1000
    api_workers = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    print("| target | free>0, alone, ok | free>0, shared, ok | free>0, shared, miss "
          "| free>0, alone, miss | free=0, ok | free=0, miss |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for target in data["targets"]:
        records = [r for r in target["records"] if r["ttft"] is not None]
        by_round = collections.defaultdict(list)
        for record in records:
            by_round[record["round"]].append(record)
        counts = collections.Counter()
        for round_records in by_round.values():
            for record in round_records:
                sent = record["sent_at"]
                others = [o for o in round_records if o is not record
                          and o["replica"] == record["replica"]
                          and o["sent_at"] <= sent < o["sent_at"] + o["e2e"]]
                busy = {o.get("api_worker") for o in others}
                free = len(busy) < api_workers
                shared = record.get("api_worker") in busy
                missed = record["ttft"] > ttft_us
                if free:
                    key = ("free>0", "shared" if shared else "alone", "miss" if missed else "ok")
                else:
                    key = ("free=0", "miss" if missed else "ok")
                counts[key] += 1
        cells = [counts[("free>0", "alone", "ok")], counts[("free>0", "shared", "ok")],
                 counts[("free>0", "shared", "miss")], counts[("free>0", "alone", "miss")],
                 counts[("free=0", "ok")], counts[("free=0", "miss")]]
        print(f"| {target['name']} | " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
