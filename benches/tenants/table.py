"""The table of benches/tenants.sh: for each run, requests, successes, 429s, TTFT p50/p95 and
goodput (TTFT <= 1 s, TPOT <= 50 ms), read from the runs' bench JSON (xz) in OUT_DIR; then,
from the gateway's /metrics before and after the `fair` run, how long each tenant waited
for a place in it and how many requests burst past the replica's limit."""

import json
import lzma
import pathlib
import re
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
    print_admission(out)


def scrape(path):
    """Samples of a Prometheus text file: {(name, labels): value}."""
    samples = {}
    for line in path.read_text().splitlines():
        found = re.match(r"(\w+)(\{.*\})? (\S+)$", line)
        if found:
            samples[(found.group(1), found.group(2) or "")] = float(found.group(3))
    return samples


def print_admission(out):
    before, after = out / "admission-before-fair.txt", out / "admission-after-fair.txt"
    if not (before.exists() and after.exists()):
        return
    first, last = scrape(before), scrape(after)
    during = {key: value - first.get(key, 0.0) for key, value in last.items()}
    bursts = during.get(("laneway_admission_bursts_total", ""), 0.0)
    print()
    print(f"During `fair`: {bursts:.0f} admissions past the replica's limit (tenant_burst).")
    print()
    print("| tenant | admitted | waited <= 1 ms | <= 10 ms | <= 100 ms | <= 1 s | mean wait (ms) |")
    print("|---|---|---|---|---|---|---|")
    for tenant in ("light", "heavy"):
        label = f'tenant="{tenant}"'
        count = during.get(("laneway_admission_wait_seconds_count", "{" + label + "}"), 0.0)
        total = during.get(("laneway_admission_wait_seconds_sum", "{" + label + "}"), 0.0)
        if not count:
            continue
        within = [
            during.get(("laneway_admission_wait_seconds_bucket", "{" + label + f',le="{le}"' + "}"), 0.0)
            for le in ("0.001", "0.01", "0.1", "1")
        ]
        shares = " | ".join(f"{n / count:.0%}" for n in within)
        print(f"| {tenant} | {count:.0f} | {shares} | {1000 * total / count:.1f} |")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
