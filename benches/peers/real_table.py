#!/usr/bin/env python3
"""Markdown tables of the real-engine parts (benches/peers/real_client.py's JSON).

    real_table.py FILE.json...              one table per workload
    real_table.py --overview FILE.json...   one row per workload, one column per target
    real_table.py --compare REAL.json SIM.json
                                            the same workload on real replicas and on the
                                            simulator: each target's figures side by side,
                                            and the targets ranked by TTFT p90 on each

Per target: the mean over its rounds, and for goodput, TTFT p90 and the hit ratio the
spread over rounds (min-max): on these noisy machines a difference inside the spread is no
difference.
"""

import json
import sys


def _values(runs, key):
    return [r[key] for r in runs if r.get(key) is not None]


def _mean(values):
    return sum(values) / len(values) if values else None


def _fmt(value, scale=1.0, digits=3):
    if value is None:
        return "-"
    return f"{value * scale:.{digits}f}"


def _spread(runs, key, scale=1.0, digits=3):
    values = _values(runs, key)
    if not values:
        return "-"
    mean = _fmt(_mean(values), scale, digits)
    if len(values) == 1:
        return mean
    return f"{mean} ({_fmt(min(values), scale, digits)}-{_fmt(max(values), scale, digits)})"


def _split(runs):
    """Requests per replica, summed over rounds: from the replicas' own counters when they
    were read, else from the gateway's x-laneway-replica / the simulator's x-sim-replica."""
    if all(r.get("replica_requests") for r in runs):
        totals = [sum(col) for col in zip(*(r["replica_requests"] for r in runs))]
        return "/".join(str(t) for t in totals)
    merged = {}
    for r in runs:
        for name, count in (r.get("replicas_by_header") or {}).items():
            merged[name] = merged.get(name, 0) + count
    return "/".join(str(merged[k]) for k in sorted(merged)) if merged else "-"


def by_target(doc):
    groups = {}
    for target in doc["targets"]:
        groups[target] = [r for r in doc["runs"] if r["target"] == target]
    return groups


def describe(doc):
    params = ", ".join(f"{k} {v}" for k, v in doc["params"].items() if k not in ("seed", "run_id"))
    cal = doc["calibration"]
    return (f"{params}; seed {doc['params']['seed']}. Goodput: TTFT <= {doc['slo']['ttft_ms']:g} ms "
            f"and TPOT <= {doc['slo']['tpot_ms']:g} ms, over the planned requests. Model "
            f"`{doc['model']}`, {cal['tokens_per_word']:.3f} tokens/word ({cal['method']}).")


def render(doc):
    lines = [f"### {doc['name']}" + (f": {doc['description']}" if doc.get("description") else ""), "",
             describe(doc), "",
             "| target | goodput | TTFT p90 ms | hit ratio | TTFT p50 ms | TPOT p50 ms | TPOT p90 ms "
             "| out tok/s | tokens in/out | ok/planned | requests per replica |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for target, runs in by_target(doc).items():
        if not runs:
            continue
        ok = sum(r["ok"] for r in runs)
        planned = sum(r["planned"] for r in runs)
        lines.append("| " + " | ".join([
            target,
            _spread(runs, "goodput"),
            _spread(runs, "ttft_p90", 1000, 0),
            _spread(runs, "hit_ratio"),
            _fmt(_mean(_values(runs, "ttft_p50")), 1000, 0),
            _fmt(_mean(_values(runs, "tpot_p50")), 1000, 1),
            _fmt(_mean(_values(runs, "tpot_p90")), 1000, 1),
            _fmt(_mean(_values(runs, "output_tokens_per_s")), 1, 0),
            f"{_fmt(_mean(_values(runs, 'prompt_tokens_mean')), 1, 0)}/"
            f"{_fmt(_mean(_values(runs, 'completion_tokens_mean')), 1, 1)}",
            f"{ok}/{planned}",
            _split(runs),
        ]) + " |")
        for r in runs:
            for message, count in (r.get("errors") or {}).items():
                errors.append(f"- {target} round {r['round']}: {count} x `{message}`")
    entries = []
    for target, runs in by_target(doc).items():
        merged = {}
        for r in runs:
            for key, count in (r.get("laneway_entries") or {}).items():
                merged[key] = merged.get(key, 0) + count
        if merged:
            entries.append(f"{target} " + ", ".join(f"{k} {v}" for k, v in sorted(merged.items())))
    lines.append("")
    if entries:
        lines += ["laneway entry/strategy of the answered requests (response headers): " + "; ".join(entries) + ".", ""]
    lines.append(f"{len({r['round'] for r in doc['runs']})} interleaved rounds; mean (min-max over "
                 "rounds). Hit ratio = sum cached_tokens / sum prompt_tokens (the replicas' usage).")
    if errors:
        lines += ["", "Failed requests:", *errors]
    return "\n".join(lines) + "\n"


def one_line(summary):
    def ms(key, digits=0):
        return _fmt(summary.get(key), 1000, digits)

    return (f"goodput {_fmt(summary['goodput'])}, TTFT p50/p90 {ms('ttft_p50')}/{ms('ttft_p90')} ms, "
            f"TPOT p50/p90 {ms('tpot_p50', 1)}/{ms('tpot_p90', 1)} ms, hit {_fmt(summary['hit_ratio'])}, "
            f"{summary['ok']}/{summary['planned']} ok, {summary['duration_s']:.1f} s")


def overview(docs):
    targets = []
    for doc in docs:
        targets += [t for t in doc["targets"] if t not in targets]
    lines = ["| workload | " + " | ".join(targets) + " |", "|---|" + "---|" * len(targets)]
    for doc in docs:
        groups = by_target(doc)
        cells = []
        for target in targets:
            runs = groups.get(target) or []
            if not runs:
                cells.append("-")
                continue
            cells.append(f"{_spread(runs, 'goodput')}, p90 {_fmt(_mean(_values(runs, 'ttft_p90')), 1, 2)} s, "
                         f"hit {_fmt(_mean(_values(runs, 'hit_ratio')), 1, 2)}")
        lines.append(f"| {doc['name']} | " + " | ".join(cells) + " |")
    lines += ["", "Each cell: goodput mean (min-max over rounds), TTFT p90 mean, hit ratio mean."]
    return "\n".join(lines) + "\n"


def compare(real, sim):
    """One workload measured on real replicas and on simulated ones (benches/sim_vs_real.sh)."""
    groups = {"real": by_target(real), "sim": by_target(sim)}
    targets = [t for t in real["targets"] if t in sim["targets"]]

    def mean(side, target, key):
        return _mean(_values(groups[side].get(target) or [], key))

    lines = [f"### {real['name']}: real vLLM against the simulator", "",
             "| target | TTFT p50 ms real / sim | TTFT p90 ms real / sim | TPOT p50 ms real / sim "
             "| goodput real / sim | hit ratio real / sim |",
             "|---|---|---|---|---|---|"]
    for target in targets:
        cells = []
        for key, scale, digits in (("ttft_p50", 1000, 0), ("ttft_p90", 1000, 0), ("tpot_p50", 1000, 1),
                                   ("goodput", 1, 3), ("hit_ratio", 1, 3)):
            r, s = mean("real", target, key), mean("sim", target, key)
            ratio = f" ({s / r:.2f}x)" if r and s and scale != 1 else ""
            cells.append(f"{_fmt(r, scale, digits)} / {_fmt(s, scale, digits)}{ratio}")
        lines.append(f"| {target} | " + " | ".join(cells) + " |")

    def ranked(side):
        order = sorted(targets, key=lambda t: (-(mean(side, t, "goodput") or 0), mean(side, t, "ttft_p90") or 0))
        return ", ".join(order)

    lines += ["", f"Best to worst (goodput, then TTFT p90): real {ranked('real')}; "
              f"simulated {ranked('sim')}.", ""]
    return "\n".join(lines) + "\n"


def main(argv):
    if argv and argv[0] == "--compare":
        if len(argv) != 3:
            print(__doc__, file=sys.stderr)
            return 2
        with open(argv[1]) as f, open(argv[2]) as g:
            print(compare(json.load(f), json.load(g)), end="")
        return 0
    want_overview = bool(argv) and argv[0] == "--overview"
    files = argv[1:] if want_overview else argv
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    docs = []
    for path in files:
        with open(path) as f:
            docs.append(json.load(f))
    if want_overview:
        print(overview(docs), end="")
    else:
        print("\n".join(render(doc) for doc in docs), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
