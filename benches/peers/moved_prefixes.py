#!/usr/bin/env python3
"""Which cache misses of a real-prefix run moved a group off a replica that still held it.

Reads benches/peers/real_client.py's JSON (real-prefix: each request names its group and,
through laneway's x-laneway-replica header, its replica) and prints per target and round:
the requests, the hits (cached tokens >= --hit-share of the prompt), and the misses whose
group's previous request went to the other replica. A move is counted as one of a group
still held when fewer than --held-within other groups were sent to that replica since the
group's last request there: with LRU eviction, its blocks were then most likely still
cached, and the miss was a placement's choice, not an eviction's.

usage: moved_prefixes.py RUN.json [--held-within N] [--hit-share S]
"""

import argparse
import collections
import json
import sys


def moves(requests, held_within, hit_share):
    """(requests, hits, moved misses, moved misses of a group still held) of one run."""
    by_replica = collections.defaultdict(list)
    last = {}
    hits = moved = moved_held = 0
    ok = sorted((r for r in requests if r["error"] is None), key=lambda r: r["sent_at"])
    for request in ok:
        group, replica = request["group"], request.get("laneway_replica")
        hit = (request["cached_tokens"] or 0) >= hit_share * (request["prompt_tokens"] or 1)
        hits += hit
        if group in last and last[group][0] != replica and not hit:
            previous, position = last[group]
            others = set(by_replica[previous][position + 1:]) - {group}
            moved += 1
            moved_held += len(others) < held_within
        by_replica[replica].append(group)
        last[group] = (replica, len(by_replica[replica]) - 1)
    return len(ok), hits, moved, moved_held


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json")
    parser.add_argument("--held-within", type=int, default=6,
                        help="other groups a replica's cache holds besides one (default 6)")
    parser.add_argument("--hit-share", type=float, default=0.7,
                        help="cached share of the prompt that makes a hit (default 0.7)")
    args = parser.parse_args(argv)
    with open(args.json) as f:
        doc = json.load(f)
    runs = collections.defaultdict(list)
    for request in doc["requests"]:
        runs[(request["target"], request["round"])].append(request)
    print("| target | round | requests | hits | moved misses | of a group still held |")
    print("|---|---|---|---|---|---|")
    for target in doc["targets"]:
        for (name, round_no), requests in sorted(runs.items()):
            if name == target:
                counts = moves(requests, args.held_within, args.hit_share)
                print(f"| {name} | {round_no} | " + " | ".join(map(str, counts)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
