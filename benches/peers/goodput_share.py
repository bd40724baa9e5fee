#!/usr/bin/env python3
"""Goodput as a share of requests, per target and per round, from a `laneway bench --json`
file (plain or .xz): a request is good when it succeeded with TTFT <= TTFT_MS and TPOT <=
TPOT_MS (wall clock). Prints a Markdown table: mean share, each round's share and the
spread (max - min), and the TTFT p50 of the 1000- and 9000-token requests.

    goodput_share.py RESULTS.json[.xz] TTFT_MS TPOT_MS
"""
import json
import lzma
import statistics
import sys


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def good(record, ttft_us, tpot_us):
    if record["outcome"]["kind"] != "success" or record["ttft"] is None:
        return False
    if record["ttft"] > ttft_us:
        return False
    if record["output_tokens"] >= 2:
        tpot = (record["e2e"] - record["ttft"]) / (record["output_tokens"] - 1)
        if tpot > tpot_us:
            return False
    return True


def p50_ttft_ms(records, long):
    values = [r["ttft"] / 1000 for r in records
              if r["ttft"] is not None and (r["prompt_tokens"] > 4000) == long]
    return f"{statistics.median(values):.0f}" if values else "-"


def main():
    path, ttft_ms, tpot_ms = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    document = load(path)
    print(f"Goodput share (TTFT <= {ttft_ms:g} ms, TPOT <= {tpot_ms:g} ms wall clock), "
          f"`{path.rsplit('/', 1)[-1]}`:\n")
    print("| target | goodput | rounds | spread | TTFT p50 short (ms) | TTFT p50 long (ms) |")
    print("|---|---|---|---|---|---|")
    for target in document["targets"]:
        records = target["records"]
        rounds = sorted({r["round"] for r in records})
        shares = []
        for number in rounds:
            in_round = [r for r in records if r["round"] == number]
            shares.append(sum(good(r, ttft_ms * 1000, tpot_ms * 1000) for r in in_round) / len(in_round))
        mean = sum(shares) / len(shares) if shares else float("nan")
        spread = max(shares) - min(shares) if shares else float("nan")
        each = " ".join(f"{s:.3f}" for s in shares)
        print(f"| {target['name']} | {mean:.3f} | {each} | {spread:.3f} | "
              f"{p50_ttft_ms(records, False)} | {p50_ttft_ms(records, True)} |")
    print()


if __name__ == "__main__":
    main()
