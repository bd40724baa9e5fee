"""The table of benches/tenants.sh: for each run, requests, successes, 429s, TTFT p50/p95 and
goodput (TTFT <= 1 s, TPOT <= 50 ms), read from the runs' bench JSON (xz) in OUT_DIR."""

import json
import lzma
import pathlib
import sys

RUNS = [
    ("light-alone", "light key alone"),
    ("fair-light", "light key, heavy key at 10x beside it (tenants)"),
    ("fair-heavy", "heavy key (tenants)"),
    ("fifo-light", "light traffic, heavy beside it, no keys (one flow)"),
    ("fifo-heavy", "heavy traffic, no keys"),
    ("high-alone", "band 8 alone"),
    ("priority-high", "band 8 under a band 1 flood at 3x capacity"),
    ("priority-flood", "band 1 flood"),
    ("oneband-high", "the same rate in band 4, flood in band 4 too"),
    ("oneband-flood", "band 4 flood"),
]


def main(out):
    print("| run | what | requests | ok | 429 | other failures | TTFT p50 (ms) | TTFT p95 (ms) | goodput (req/s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, what in RUNS:
        path = out / f"{name}.json.xz"
        if not path.exists():
            continue
        target = json.loads(lzma.open(path).read())["targets"][0]
        summary = target["summary"]
        statuses = [r["outcome"] for r in target["records"] if r["outcome"]["kind"] == "http_status"]
        too_many = sum(1 for o in statuses if o["detail"] == 429)
        other = summary["failures"] - too_many
        print(
            f"| {name} | {what} | {summary['requests']} | {summary['successes']} | {too_many} | {other} "
            f"| {summary['ttft']['p50_ms']:.1f} | {summary['ttft']['p95_ms']:.1f} "
            f"| {summary['goodput_rps'] or 0:.2f} |"
        )


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
