#!/usr/bin/env python3
"""Reads the JSON that `laneway bench` wrote for each case of benches/peers.sh and checks
the issue's targets, printing a Markdown section for results.md.

  verdict.py targets OUT_DIR
  verdict.py streams STREAMS_JSON IDLE_RSS_KB PEAK_RSS_KB STREAMS [EVENTS_SENT]
  verdict.py cpu CASE_JSON CPU_JSON CLOCK_TICKS_PER_SECOND

Capacity: on this machine the load generator and the simulated fleet saturate their core
before a proxy saturates its own, so requests per second at a fixed concurrency measure
added latency, not capacity. Capacity is read from CPU time instead: each proxy's user +
system CPU over a case (peers.sh records it per process tree), divided into its successful
requests, gives requests per CPU-second on its one pinned core.

Noise: targets are measured in interleaved rounds; for a figure compared between laneway
and a peer, the noise band is the larger of 5% and the relative spread (max - min over
median) of the per-round medians of either side. "No worse within noise" means laneway's
figure is at most the peer's times (1 + band).
"""
import glob
import json
import lzma
import os
import statistics
import sys


def load(path):
    """A case's JSON, as written or compressed by peers.sh (`.json.xz`)."""
    if not os.path.exists(path) and os.path.exists(path + ".xz"):
        path += ".xz"
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def exists(path):
    return os.path.exists(path) or os.path.exists(path + ".xz")


def by_name(document):
    return {target["name"]: target for target in document["targets"]}


def per_round_medians(target, pick):
    rounds = {}
    for record in target["records"]:
        if record["outcome"]["kind"] != "success":
            continue
        value = pick(record)
        if value is not None:
            rounds.setdefault(record["round"], []).append(value)
    return [statistics.median(values) for values in rounds.values() if values]


def spread(values):
    if len(values) < 2:
        return 0.0
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def ttft_ms(record):
    return None if record["ttft"] is None else record["ttft"] / 1000.0


def e2e_ms(record):
    return record["e2e"] / 1000.0


def mark(ok):
    return "met" if ok else "**not met**"


def short_case(out, case, lines):
    path = os.path.join(out, f"{case}.json")
    if not exists(path):
        return
    targets = by_name(load(path))
    if "laneway" not in targets:
        lines.append("- Short: laneway was not measured (it did not start).")
        return
    mine = targets["laneway"]["summary"]["ttft"]["p50_ms"]
    for keep_alive in ("haproxy-rr", "haproxy-rr-nd"):
        if keep_alive in targets:
            theirs = targets[keep_alive]["summary"]["ttft"]["p50_ms"]
            ratio = mine / theirs if theirs else float("inf")
            lines.append(
                f"- {case}, TTFT p50 at most 1/5 of keep-alive round robin (`{keep_alive}`): "
                f"{mine:.1f} ms vs {theirs:.1f} ms = {ratio:.2f}x: {mark(ratio <= 0.2)}"
            )
    peers = [n for n in targets if n.startswith(("haproxy", "sglang", "vllm"))]
    beaten = [n for n in peers if targets[n]["summary"]["ttft"]["p50_ms"] > mine]
    worse = [f"{n} {targets[n]['summary']['ttft']['p50_ms']:.1f} ms" for n in peers if n not in beaten]
    lines.append(
        f"- {case}, TTFT p50 lower than every HAProxy variant and both routers: "
        f"{mark(not worse)}" + (f" (not below: {', '.join(worse)})" if worse else "")
    )


def long_case(out, name, lines):
    path = os.path.join(out, f"{name}.json")
    if not exists(path):
        return
    targets = by_name(load(path))
    if "laneway" not in targets:
        lines.append(f"- {name}: laneway was not measured.")
        return
    peers = [n for n in targets if n not in ("laneway", "direct")]
    for label, pick, summary_value in (
        ("TTFT p50", ttft_ms, lambda s: s["ttft"]["p50_ms"]),
        ("P95 latency", e2e_ms, lambda s: s["e2e"]["p95_ms"]),
    ):
        best = min(peers, key=lambda n: summary_value(targets[n]["summary"]) or float("inf"))
        theirs = summary_value(targets[best]["summary"])
        mine = summary_value(targets["laneway"]["summary"])
        band = max(
            0.05,
            spread(per_round_medians(targets[best], pick)),
            spread(per_round_medians(targets["laneway"], pick)),
        )
        ok = mine <= theirs * (1 + band)
        lines.append(
            f"- {name}, {label} no worse than the best peer (`{best}`) within noise "
            f"(band {band * 100:.0f}%): {mine:.1f} ms vs {theirs:.1f} ms: {mark(ok)}"
        )


def overhead_case(out, lines):
    path = os.path.join(out, "overhead-5000rps.json")
    if exists(path):
        targets = by_name(load(path))
        for ours in ("laneway", "laneway-spread"):
            if ours not in targets or "direct" not in targets:
                continue
            mine, direct = targets[ours]["summary"], targets["direct"]["summary"]
            p50 = (mine["e2e"]["p50_ms"] - direct["e2e"]["p50_ms"]) * 1000
            p99 = (mine["e2e"]["p99_ms"] - direct["e2e"]["p99_ms"]) * 1000
            lines.append(f"- Overhead at 5,000 req/s, `{ours}` adds p50 <= 100 us: {p50:.0f} us: {mark(p50 <= 100)}")
            lines.append(f"- Overhead at 5,000 req/s, `{ours}` adds p99 <= 1 ms: {p99:.0f} us: {mark(p99 <= 1000)}")
            lines.append(
                f"- Overhead run through `{ours}`: {mine['failures']} failures of {mine['requests']} "
                f"{dict(mine['failures_by_kind'])}, {mine['successes'] / max(mine['elapsed_s'], 1e-9):.0f} ok req/s"
            )
    capacity = cpu_capacity(out, "overhead-5000rps")
    per_cpu_second = {name: ok / seconds for name, (seconds, ok) in capacity.items() if seconds > 0}
    for ours in ("laneway", "laneway-spread"):
        if ours not in per_cpu_second:
            continue
        mine = per_cpu_second[ours]
        for peer, factor in (("haproxy-rr-nd", 1), ("sglang-round-robin", 2), ("vllm-round-robin", 2)):
            if peer in per_cpu_second:
                theirs = per_cpu_second[peer]
                lines.append(
                    f"- Capacity (ok requests per CPU-second at 5,000 req/s), `{ours}` at least {factor}x "
                    f"`{peer}`: {mine:.0f} vs {theirs:.0f} = {mine / theirs:.2f}x: {mark(mine >= factor * theirs)}"
                )
    path = os.path.join(out, "saturation-c32.json")
    if exists(path):
        targets = by_name(load(path))
        if "laneway" not in targets:
            return
        rate = lambda n: targets[n]["summary"]["successes"] / max(targets[n]["summary"]["elapsed_s"], 1e-9)
        mine = rate("laneway")
        for ours in ("laneway", "laneway-spread"):
            if ours not in targets:
                continue
            mine = rate(ours)
            for peer, factor in (("haproxy-rr-nd", 1), ("sglang-round-robin", 2), ("vllm-round-robin", 2)):
                if peer in targets:
                    theirs = rate(peer)
                    lines.append(
                        f"- Throughput at 32 connections (bounded by the load side), `{ours}` at least {factor}x `{peer}`: {mine:.0f} vs {theirs:.0f} "
                        f"req/s = {mine / theirs:.2f}x: {mark(mine >= factor * theirs)}"
                    )


def cpu_capacity(out, case):
    """{target: (cpu seconds, ok requests)} for a case, if its CPU record exists."""
    cpu_path = os.path.join(out, case + ".cpu.json")
    if not os.path.exists(cpu_path) or not exists(os.path.join(out, case + ".json")):
        return {}
    with open(cpu_path) as handle:
        ticks = json.load(handle)
    per_second = float(ticks.pop("_ticks_per_second", 100))
    targets = by_name(load(os.path.join(out, case + ".json")))
    return {
        name: (count / per_second, targets[name]["summary"]["successes"])
        for name, count in ticks.items()
        if name in targets
    }


def cpu_mode(case_json, cpu_json, ticks_per_second):
    with open(cpu_json) as handle:
        ticks = json.load(handle)
    ticks["_ticks_per_second"] = float(ticks_per_second)
    with open(cpu_json, "w") as handle:
        json.dump(ticks, handle)
    out = os.path.dirname(case_json)
    case = os.path.basename(case_json)[: -len(".json")]
    rows = cpu_capacity(out, case)
    if not rows:
        return
    print("CPU per proxy (user + system, its process tree):\n")
    print("| target | CPU s | ok requests | CPU us per ok request | ok requests per CPU-second |")
    print("|---|---:|---:|---:|---:|")
    for name, (seconds, ok) in rows.items():
        per_request = seconds * 1e6 / ok if ok else float("nan")
        per_cpu_second = ok / seconds if seconds else float("inf")
        print(f"| {name} | {seconds:.2f} | {ok} | {per_request:.1f} | {per_cpu_second:.0f} |")
    print()


def targets_mode(out):
    lines = ["## Targets", ""]
    short_case(out, "short-1000-300-c6", lines)
    short_case(out, "short-1000-300-c6-ramp", lines)
    long_case(out, "long-9000-600-c2", lines)
    long_case(out, "long-50000-1000-c1", lines)
    overhead_case(out, lines)
    for path in sorted(glob.glob(os.path.join(out, "streams-*.md"))):
        with open(path) as handle:
            lines.append(handle.read().strip())
    if len(lines) == 2:
        lines.append("- No case with laneway was run.")
    print("\n".join(lines) + "\n")


def streams_mode(path, idle_kb, peak_kb, streams, events_sent=None):
    targets = by_name(load(path))
    lines = []
    if "laneway" not in targets:
        print("- Streams: laneway was not measured.")
        return
    mine = targets["laneway"]
    summary = mine["summary"]
    expected = targets["direct"]["summary"]["chunks_max"] if "direct" in targets else summary["chunks_max"]
    short = sum(
        1 for r in mine["records"] if r["outcome"]["kind"] == "success" and r["chunks"] < expected
    )
    per_stream_kib = (int(peak_kb) - int(idle_kb)) / int(streams)
    lines.append(
        f"- Streams, {streams} concurrent through laneway with no error: "
        f"{summary['failures']} failures {dict(summary['failures_by_kind'])}: {mark(summary['failures'] == 0)}"
    )
    if events_sent is not None:
        # The simulator coalesces tokens that queued behind a busy API process into one
        # event, so streams differ in event count; what must hold is that every event the
        # replicas handed out reached a client, through laneway or directly.
        received = sum(
            r["chunks"] for target in targets.values() for r in target["records"]
            if r["outcome"]["kind"] == "success"
        )
        failures = sum(target["summary"]["failures"] for target in targets.values())
        lost = int(events_sent) - received
        lines.append(
            f"- Streams, no lost chunk: the replicas sent {events_sent} choice events, the clients "
            f"received {received} (direct and through laneway, {failures} failed requests): "
            f"{lost} lost: {mark(lost == 0 and failures == 0)}"
        )
    else:
        lines.append(
            f"- Streams, no lost chunk: {short} streams with fewer than the {expected} chunks a direct "
            f"stream carries (min {summary['chunks_min']}, max {summary['chunks_max']}): {mark(short == 0)}"
        )
    lines.append(
        f"- Streams, memory: laneway RSS {int(idle_kb) / 1024:.1f} MiB idle, peak {int(peak_kb) / 1024:.1f} MiB "
        f"= {per_stream_kib:.1f} KiB per stream"
    )
    text = "\n".join(lines) + "\n"
    with open(os.path.join(os.path.dirname(path), f"streams-{streams}.md"), "w") as handle:
        handle.write(text)
    print(text)


if __name__ == "__main__":
    if sys.argv[1:2] == ["targets"]:
        targets_mode(sys.argv[2])
    elif sys.argv[1:2] == ["streams"]:
        streams_mode(*sys.argv[2:7])
    elif sys.argv[1:2] == ["cpu"]:
        cpu_mode(*sys.argv[2:5])
    else:
        sys.exit(__doc__)
