"""`benches/peers/fit_profile.py`: figures computed from known engine costs, by the
simulator's own step formula, give those costs back, and the fitted profile keeps every
other line of the profile it refits."""

import importlib.util
import json
import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROFILE = ROOT / "config/profiles/vllm-cpu-tiny.toml"


def load_fitter():
    spec = importlib.util.spec_from_file_location("fit_profile", ROOT / "benches/peers/fit_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COSTS = {"step_base_us": 4000.0, "decode_us_per_seq": 200.0, "decode_ns_per_context_token": 120.0,
         "prefill_us_per_token": 20.0, "attention_ns_per_token_pair": 6.0}


def figures_from(costs: dict, profile: dict) -> dict:
    """What single_requests.py would measure on an engine that costs exactly `costs`."""
    fitter = load_fitter()
    api, budget = profile["api"], profile["engine"]["max_num_batched_tokens"]

    def tpot(streams: int, context: float) -> float:
        per_seq = costs["decode_us_per_seq"] + costs["decode_ns_per_context_token"] / 1000 * context
        return (costs["step_base_us"] + streams * per_seq) / 1000

    def ttft(tokens: int) -> float:
        steps = sum(
            costs["step_base_us"] + costs["prefill_us_per_token"] * size
            + costs["attention_ns_per_token_pair"] / 1000 * size * (start + size / 2)
            for start, size in fitter.chunks(tokens, budget))
        fixed = api["request_overhead_us"] + api["tokenize_us_per_token"] * tokens + api["per_chunk_us"]
        return (fixed + steps) / 1000

    return {
        "name": "engine",
        "ttft_ms": {str(n): ttft(n) for n in (128, 1024, 4096, 8192)},
        "tpot_ms": {str(s): tpot(s, 128 + 64) for s in (1, 4, 16)},
        "tpot_by_context_ms": {str(c): tpot(1, c + 64) for c in (128, 1024, 4096, 8192)},
    }


def test_figures_of_known_costs_give_those_costs_back(tmp_path):
    profile = tomllib.loads(PROFILE.read_text())
    figures = tmp_path / "figures.json"
    figures.write_text(json.dumps(figures_from(COSTS, profile)))
    out = tmp_path / "fitted.toml"
    printed = subprocess.run(
        [sys.executable, str(ROOT / "benches/peers/fit_profile.py"), "--figures", str(figures),
         "--profile", str(PROFILE), "--out", str(out)],
        check=True, capture_output=True, text=True).stdout
    fitted = json.loads(printed)
    for key, value in COSTS.items():
        assert abs(fitted[key] - value) <= 0.01 * value, (key, fitted[key], value)
    written = tomllib.loads(out.read_text())
    for key, value in COSTS.items():
        assert abs(written["engine"][key] - value) <= 0.01 * value + 0.05, (key, written["engine"])
    # Everything else is the profile's own.
    assert written["api"] == profile["api"]
    for key in ("max_num_batched_tokens", "kv_cache_tokens", "step_jitter", "block_size"):
        assert written["engine"][key] == profile["engine"][key]
    assert written["served_model_name"] == profile["served_model_name"]


def test_a_cost_the_figures_put_below_zero_is_held_at_zero():
    fitter = load_fitter()
    # TPOT that falls as the context grows: no cost per token of context, the rest refitted.
    figures = {"tpot_ms": {"1": 4.2, "4": 5.0, "16": 8.2},
               "tpot_by_context_ms": {"128": 4.3, "1024": 4.2, "4096": 4.1, "8192": 4.0}}
    decode = fitter.fit_decode(figures)
    assert decode["decode_ns_per_context_token"] == 0.0
    assert decode["step_base_us"] > 0 and decode["decode_us_per_seq"] > 0
