#!/usr/bin/env python3
"""The lowest TTFT p90 any placement could reach on a shared-prefix run, from its own hits.

Reads real-prefix runs (benches/peers/real_client.py's JSON) and, per target, splits the
requests into misses (cached tokens < --hit-share of the prompt) and hits, and the hits into
those that ran alone (no other request of the same run and round in flight, on any replica,
from the moment it was sent to its first token) and the rest. A placement decides where a
request runs, not how fast the engine answers a prompt it holds with nothing else to do, and
every group's first request misses whatever the placement (the prompts are salted per target
and round). So no placement's p90 can be expected below the p90 of a run whose unavoidable
misses (one per group) are its fastest and whose every hit is drawn from the hits that ran
alone. The hits that ran alone are pooled over every target and round of the file: the
targets were measured in interleaved rounds on the same engines, and what a hit alone costs
is the engine's, not the gateway's. The floor is printed, as the mean over a target's
rounds, beside its measured p90 and the share of its hits that ran alone.

The machine is shared (client, gateway and the replicas' API processes on two cores), so a
hit alone on its replica still feels the other's work; "alone" means alone in the fleet, the
strictest reading, which makes the floor lower, not higher.

usage: hit_floor.py RUN.json [RUN.json ...] [--hit-share S] [--draws D] [--seed X]
"""

import argparse
import collections
import json
import math
import random


def quantile(values, share):
    """The `share` quantile of `values`, interpolated between ranks as real_client.py's."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * share
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def overlaps(request, other):
    """`other` was in flight at some point between `request`'s send and its first token."""
    start, first = request["sent_at"], request["sent_at"] + request["ttft"]
    end = other["sent_at"] + other["e2e"]
    return other is not request and other["sent_at"] < first and start < end


def expected_p90(misses, pool, hits, draws, rng):
    """The mean p90 over `draws` runs of `misses` and `hits` TTFTs drawn from `pool`."""
    total = 0.0
    for _ in range(draws):
        total += quantile(misses + [rng.choice(pool) for _ in range(hits)], 0.9)
    return total / draws


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--hit-share", type=float, default=0.5)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=49)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for path in args.runs:
        with open(path) as f:
            data = json.load(f)
        groups = data["params"]["groups"]
        reported = {(r["target"], r["round"]): r["ttft_p90"] for r in data["runs"]}
        rounds = collections.defaultdict(list)
        for request in data["requests"]:
            if request["status"] == 200:
                rounds[(request["target"], request["round"])].append(request)
        per_target = collections.defaultdict(list)
        for (target, round_), requests in sorted(rounds.items()):
            hits, misses = [], []
            for r in requests:
                hit = r["cached_tokens"] >= args.hit_share * r["prompt_tokens"]
                (hits if hit else misses).append(r)
            alone = [r["ttft"] for r in hits if not any(overlaps(r, o) for o in requests)]
            per_target[target].append(
                {
                    "p90": reported[(target, round_)],
                    "requests": requests,
                    "hits": hits,
                    "fastest_misses": sorted(misses, key=lambda r: r["ttft"])[:groups],
                    "alone": alone,
                }
            )
        alone = [t for runs in per_target.values() for run in runs for t in run["alone"]]
        print(f"{path}: {groups} groups, TTFT p90 in ms, mean of rounds")
        print(f"  {'target':<22} {'p90':>6} {'floor':>6} {'hits alone':>11}")
        if not alone:
            print("  no hit ran alone")
            continue
        for target, runs in per_target.items():
            measured = sum(run["p90"] for run in runs) / len(runs)
            floor = 0.0
            for run in runs:
                misses = [r["ttft"] for r in run["fastest_misses"]]
                count = len(run["requests"]) - len(misses)
                floor += expected_p90(misses, alone, count, args.draws, rng)
            share = sum(len(run["alone"]) for run in runs) / sum(len(run["hits"]) for run in runs)
            print(
                f"  {target:<22} {measured * 1e3:6.0f} {floor / len(runs) * 1e3:6.0f} "
                f"{share:11.2f}"
            )


if __name__ == "__main__":
    main()
