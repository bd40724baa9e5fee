"""`benches/peers/eviction_bound.py`: the cache model hits what fits and misses what does not,
keeps a prompt's head longer than its tail, and its placements never beat the oracle's
knowledge of the requests to come by chance on a workload where placement decides."""

import importlib.util
import pathlib
import random

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load():
    path = ROOT / "benches/peers/eviction_bound.py"
    spec = importlib.util.spec_from_file_location("eviction_bound", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def caches(module, replicas=2, capacity=100, context=10, own=1):
    return module.Caches(replicas, capacity, context, own)


def test_contexts_that_fit_hit_after_their_first_request_and_ones_that_cannot_never_do():
    bound = load()
    groups = [g % 4 for g in range(40)]
    # Four 10-block contexts (and one block each request) fit two 100-block caches.
    assert bound.replay(groups, caches(bound), bound.chance(1, 2)) == 36
    # A context larger than a cache is never held whole.
    assert bound.replay(groups, caches(bound, capacity=9), bound.chance(1, 2)) == 0


def test_the_least_recently_used_context_is_the_one_evicted():
    bound = load()
    one = caches(bound, replicas=1, capacity=25, context=10, own=0)
    for request, group in enumerate([0, 1, 0, 2]):
        one.serve(0, group, request)
    # Group 1 was used least recently when group 2 came: it went, 0 stayed.
    assert one.holder(0) == 0 and one.holder(1) is None and one.holder(2) == 0


def test_the_oracle_places_at_least_as_well_as_chance_under_eviction():
    bound = load()
    draws = random.Random(5)
    groups = [draws.randrange(12) for _ in range(150)]
    fresh = lambda: caches(bound, capacity=60, context=10, own=1)
    by_chance = sum(bound.replay(groups, fresh(), bound.chance(s, 2)) for s in range(10)) / 10
    by_oracle = bound.replay(groups, fresh(), bound.oracle(groups, 12))
    assert 0 < by_chance <= by_oracle < len(groups)
