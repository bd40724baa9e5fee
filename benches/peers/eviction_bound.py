#!/usr/bin/env python3
"""How many hits placement can buy when the KV caches cannot hold every shared context.

Reads a real-prefix run (benches/peers/real_client.py's JSON: each request names its group)
and replays each target's and round's order of groups through a model of the replicas' KV
caches: vLLM's prefix cache per replica, LRU over blocks, a finished request's blocks freed
last to first (so a prompt's head outlives its tail), a request's own question and answer
filling blocks of their own. Then it counts the hits three placements would have had:

  chance   a group held by a replica goes there; a group held by none goes anywhere
           (what KV-event placement does among equal replicas)
  home     the same, but a group held by none goes back to where it went last
  oracle   a group held by none goes where the next --lookahead requests, placed as
           `chance` would with the least-filled replica for new groups, hit the most: a
           placement that knows the future, an upper estimate of what any gateway could do

and prints them beside the run's measured hits (cached tokens >= --hit-share of the prompt).
The model ignores timing (requests in flight together, chunked prefill), so compare the
placements with each other, and the measured hits with them only roughly.

usage: eviction_bound.py RUN.json [--target NAME] [--cache-blocks B] [--context-blocks C]
                         [--own-blocks O] [--replicas N] [--seeds S] [--lookahead L]
"""

import argparse
import collections
import json
import random
import sys


class Caches:
    """N replicas' block caches, each an LRU of at most `capacity` blocks."""

    def __init__(self, replicas, capacity, context_blocks, own_blocks):
        self.lru = [collections.OrderedDict() for _ in range(replicas)]
        self.capacity, self.context_blocks, self.own_blocks = capacity, context_blocks, own_blocks

    def copy(self):
        other = Caches(len(self.lru), self.capacity, self.context_blocks, self.own_blocks)
        other.lru = [collections.OrderedDict(lru) for lru in self.lru]
        return other

    def holder(self, group):
        """The first replica holding the group's whole context, if any."""
        for replica, lru in enumerate(self.lru):
            if all(("context", group, b) in lru for b in range(self.context_blocks)):
                return replica
        return None

    def serve(self, replica, group, request):
        lru = self.lru[replica]
        blocks = [("context", group, b) for b in range(self.context_blocks)]
        blocks += [("own", request, b) for b in range(self.own_blocks)]
        # Freed last to first: the prompt's head ends up the most recently used.
        for block in reversed(blocks):
            lru[block] = True
            lru.move_to_end(block)
        while len(lru) > self.capacity:
            lru.popitem(last=False)

    def least_filled(self):
        return min(range(len(self.lru)), key=lambda r: len(self.lru[r]))


def replay(groups, caches, place_new):
    """Hits of `groups` served in order; `place_new(i, group, caches, last)` places a miss,
    `last` mapping each group to the replica it last went to."""
    hits, last = 0, {}
    for i, group in enumerate(groups):
        replica = caches.holder(group)
        if replica is None:
            replica = place_new(i, group, caches, last)
        else:
            hits += 1
        last[group] = replica
        caches.serve(replica, group, i)
    return hits


def chance(seed, replicas):
    draws = random.Random(seed)
    return lambda i, group, caches, last: draws.randrange(replicas)


def home(seed, replicas):
    draws = random.Random(seed)
    return lambda i, group, caches, last: last.get(group, draws.randrange(replicas))


def oracle(groups, lookahead):
    def place(i, group, caches, last):
        best = None
        for replica in range(len(caches.lru)):
            trial = caches.copy()
            trial.serve(replica, group, i)
            ahead = groups[i + 1 : i + 1 + lookahead]
            hits = replay(ahead, trial, lambda j, g, c, l: c.least_filled())
            if best is None or hits > best[0]:
                best = (hits, replica)
        return best[1]

    return place


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run")
    parser.add_argument("--target", help="only this target (default: every one)")
    parser.add_argument("--cache-blocks", type=int, default=160,
                        help="blocks per replica (40 MB of the tiny model at 128 tokens: 160)")
    parser.add_argument("--context-blocks", type=int, default=23,
                        help="full blocks of a shared context (3,000 tokens: 23)")
    parser.add_argument("--own-blocks", type=int, default=2,
                        help="blocks a request's question and answer fill")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--lookahead", type=int, default=12)
    parser.add_argument("--hit-share", type=float, default=0.5)
    args = parser.parse_args()
    with open(args.run) as f:
        requests = json.load(f)["requests"]
    runs = collections.defaultdict(list)
    for request in requests:
        if request["error"] is None and (args.target in (None, request["target"])):
            runs[(request["target"], request["round"])].append(request)
    if not runs:
        sys.exit(f"no requests in {args.run}" + (f" for {args.target}" if args.target else ""))
    fresh = lambda: Caches(args.replicas, args.cache_blocks, args.context_blocks, args.own_blocks)
    print("| target | round | requests | measured hits | chance | home | oracle |")
    print("|---|---|---|---|---|---|---|")
    for (target, round_), run in sorted(runs.items()):
        run.sort(key=lambda r: r["sent_at"])
        groups = [r["group"] for r in run]
        measured = sum(
            (r["cached_tokens"] or 0) >= args.hit_share * (r["prompt_tokens"] or 1) for r in run
        )
        mean = lambda hits: sum(hits) / len(hits)
        by_chance = mean([replay(groups, fresh(), chance(s, args.replicas))
                          for s in range(args.seeds)])
        by_home = mean([replay(groups, fresh(), home(s, args.replicas))
                        for s in range(args.seeds)])
        by_oracle = replay(groups, fresh(), oracle(groups, args.lookahead))
        print(f"| {target} | {round_} | {len(run)} | {measured} | {by_chance:.1f} | "
              f"{by_home:.1f} | {by_oracle} |")


if __name__ == "__main__":
    main()
