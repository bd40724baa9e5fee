"""`benches/peers/placement.py`'s fleet-state table on scripted records: each request is
counted under the state of the fleet's API processes when it was sent, and its SLO misses
with it."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# As when the script runs: its directory's modules (goodput_share) are importable.
sys.path.insert(0, str(ROOT / "benches/peers"))


def load_placement():
    spec = importlib.util.spec_from_file_location("placement", ROOT / "benches/peers/placement.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(replica, worker, sent_at, e2e, ttft=100_000, round_=0, output_tokens=11):
    return {
        "replica": replica,
        "api_worker": worker,
        "sent_at": sent_at,
        "e2e": e2e,
        "ttft": ttft,
        "round": round_,
        "output_tokens": output_tokens,
        "outcome": {"kind": "success"},
    }


def test_each_request_is_counted_under_the_fleet_state_when_it_was_sent():
    placement = load_placement()
    its_own, elsewhere, none = placement.FLEET_STATES
    records = [
        # Two replicas of two API processes each; r0's processes both stream from t=0 to
        # t=10 s, r1's second from t=0 to t=10 s.
        record("r0", 0, 0, 10_000_000),
        record("r0", 1, 0, 10_000_000),
        record("r1", 1, 0, 10_000_000),
        # Sent at 1 s to r1, whose process 0 is idle: the first state.
        record("r1", 0, 1_000_000, 2_000_000),
        # Sent at 2 s to r0 while r1's process 0 still serves the one before: none idle.
        record("r0", 0, 2_000_000, 1_000_000, ttft=900_000),
        # Sent at 4 s to r0 once r1's process 0 is idle again: only elsewhere; late.
        record("r0", 1, 4_000_000, 1_000_000, ttft=800_000),
        # Another round does not see the first round's streams: r0 is idle there.
        record("r0", 0, 2_000_000, 1_000_000, round_=1),
    ]
    # A TPOT objective no stream here misses: the misses are the late first tokens.
    rows = placement.fleet_state_rows(records, ttft_slo=500, tpot_slo=10_000)
    # The first three are sent at 0 with every process idle (their own replica's).
    assert (rows[its_own]["requests"], rows[its_own]["misses"]) == (5, 0)
    assert (rows[elsewhere]["requests"], rows[elsewhere]["misses"]) == (1, 1)
    assert (rows[none]["requests"], rows[none]["misses"]) == (1, 1)


def test_a_tpot_miss_or_a_failure_is_a_miss():
    placement = load_placement()
    slow = record("r0", 0, 0, 2_100_000, output_tokens=11)  # 200 ms a token after the first
    assert placement.misses_slo(slow, ttft_slo=500, tpot_slo=50)
    assert not placement.misses_slo(slow, ttft_slo=500, tpot_slo=250)
    failed = dict(record("r0", 0, 0, 1_000), outcome={"kind": "error"})
    assert placement.misses_slo(failed, ttft_slo=500, tpot_slo=50)
