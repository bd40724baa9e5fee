"""`benches/peers/real_client.py`'s shared-prefix plan: groups drawn evenly, or with a hot
group taking its share, from the seed alone."""

import importlib.util
import pathlib
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_client():
    spec = importlib.util.spec_from_file_location(
        "real_client", ROOT / "benches/peers/real_client.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan_groups(client, hot_share, requests=2000, groups=8):
    args = client.parse_args(
        ["--workload", "prefix", "--target", "t=http://127.0.0.1:1", "--json", "/dev/null",
         "--requests", str(requests), "--groups", str(groups), "--hot-share", str(hot_share)]
    )
    run = types.SimpleNamespace(args=args, salt=lambda item: f"[{item}]")
    calibration = {"tokens_per_word": 2.0}
    plan = client.prefix_plan(run, client.Words(), calibration)
    return [meta["group"] for _, _, _, meta in plan]


def test_a_hot_group_takes_its_share_and_the_others_split_the_rest():
    client = load_client()
    groups = plan_groups(client, 0.5)
    counts = [groups.count(g) for g in range(8)]
    assert 900 <= counts[0] <= 1100, counts
    assert all(100 <= c <= 190 for c in counts[1:]), counts
    assert groups == plan_groups(client, 0.5), "the plan is the seed's alone"


def test_without_a_hot_share_every_group_is_alike():
    client = load_client()
    counts = [plan_groups(client, 0).count(g) for g in range(8)]
    assert all(190 <= c <= 310 for c in counts), counts


def test_every_target_and_round_is_salted_apart_in_salts_of_one_length():
    client = load_client()
    args = client.parse_args(
        ["--workload", "conv", "--target", "t=http://127.0.0.1:1", "--json", "/dev/null"]
    )
    targets = ["laneway", "haproxy-lc-close-nd", "sglang-cache-aware", "laneway-events-x2"]
    salts = [
        client.Run(args, target, "http://127.0.0.1:1", round_no, "tiny").salt("c3")
        for target in targets
        for round_no in (1, 2, 3)
    ]
    assert len(set(salts)) == len(salts), salts
    # A target's name in its salt made its prompts longer than another's, and moved where
    # they met the engine's cache blocks.
    assert len({len(salt) for salt in salts}) == 1, salts
    assert all(salt.startswith("[c3:") and salt[4:-1].isupper() for salt in salts), salts


def test_over_as_many_rounds_as_targets_each_target_takes_each_place_once():
    client = load_client()
    targets = [("a", "u1"), ("b", "u2"), ("c", "u3")]
    orders = [[name for name, _ in client.round_order(targets, r)] for r in (1, 2, 3, 4)]
    assert orders[:3] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert orders[3] == orders[0], "the fourth round starts the turn again"
    for place in range(3):
        assert sorted(order[place] for order in orders[:3]) == ["a", "b", "c"]
