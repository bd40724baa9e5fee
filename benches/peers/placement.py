"""Where each target placed its requests, and what that did to them, from `laneway bench`
records that name the replica and the simulator's API process (`replica`, `api_worker`).

    placement.py RESULTS.json[.xz] TTFT_MS TPOT_MS [--summary]

Per target: each replica's share of the requests and its SLO misses, by prompt size (on a
mixed fleet, where the long prompts went is most of the story), then TTFT misses of the
requests by how many other streams were open on the same API process when they were sent
(the simulator's API processes slow a new request's preprocessing by the output work they
carry), then the SLO misses by the fleet's state when each request was sent: whether its
replica had an API process with no open stream, or only another replica had one, or none
did. Misses in the first two rows are placement's to win back (in the second, unless that
other replica was held back for another reason, such as a slow engine at its TPOT limit);
misses in the last are the fleet's capacity. SLOs in wall-clock milliseconds, as the bench
was run. With --summary, only that last table, one row per target (benches/peers.sh's
routing parts add it to their results).
"""

import sys
from collections import Counter, defaultdict

from goodput_share import good, load


def open_at(record, at):
    """Whether `record`'s request was open (sent, its response not ended) at `at`."""
    return record["sent_at"] <= at < record["sent_at"] + record["e2e"]


def tpot_ms(record):
    if record.get("ttft") is None or record["output_tokens"] < 2:
        return None
    return (record["e2e"] - record["ttft"]) / (record["output_tokens"] - 1) / 1000


def main():
    path, ttft_slo, tpot_slo = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    results = load(path)
    if "--summary" in sys.argv[4:]:
        print_summary(results, ttft_slo, tpot_slo)
        return
    for target in results["targets"]:
        records = [r for r in target["records"] if r.get("replica") is not None]
        if not records:
            print(f"{target['name']}: no record names its replica\n")
            continue
        print(f"### {target['name']}\n")
        by_replica = defaultdict(Counter)
        for record in records:
            ttft = record.get("ttft")
            tpot = tpot_ms(record)
            row = by_replica[(record["replica"], record["prompt_tokens"])]
            row["requests"] += 1
            row["ttft miss"] += ttft is None or ttft / 1000 > ttft_slo
            row["tpot miss"] += tpot is not None and tpot > tpot_slo
        print("| replica | prompt tokens | requests | TTFT misses | TPOT misses |")
        print("|---|---:|---:|---:|---:|")
        for replica, prompt in sorted(by_replica):
            row = by_replica[(replica, prompt)]
            print(f"| {replica} | {prompt} | {row['requests']} | {row['ttft miss']} "
                  f"| {row['tpot miss']} |")
        # Streams open on the same API process when each request was sent (same round).
        by_worker = defaultdict(list)
        for record in records:
            key = (record["round"], record["replica"], record.get("api_worker"))
            by_worker[key].append(record)
        sharing = defaultdict(Counter)
        for group in by_worker.values():
            for record in group:
                sent = record["sent_at"]
                open_streams = sum(
                    1 for other in group if other is not record and open_at(other, sent)
                )
                bucket = min(open_streams, 3)
                ttft = record.get("ttft")
                row = sharing[(record["prompt_tokens"], bucket)]
                row["requests"] += 1
                row["ttft miss"] += ttft is None or ttft / 1000 > ttft_slo
        print("\n| prompt tokens | other streams on its API process | requests | TTFT misses |")
        print("|---:|---:|---:|---:|")
        for (prompt, bucket) in sorted(sharing):
            row = sharing[(prompt, bucket)]
            label = "3+" if bucket == 3 else str(bucket)
            print(f"| {prompt} | {label} | {row['requests']} | {row['ttft miss']} |")
        print()
        print_fleet_state(records, ttft_slo, tpot_slo)
        print()


def misses_slo(record, ttft_slo, tpot_slo):
    """Not good by goodput_share.py's rule (SLOs in milliseconds)."""
    return not good(record, ttft_slo * 1000, tpot_slo * 1000)


FLEET_STATES = (
    "its replica had an idle API process",
    "only another replica had one",
    "no replica had one",
)


def fleet_state(record, same_round, workers):
    """Which of FLEET_STATES held when `record` was sent: an API process is idle when no
    stream sent to it before was still open (the simulator's process for each stream is in
    the records; a replica's processes are those any record of the run names)."""
    sent = record["sent_at"]
    open_streams = Counter(
        (other["replica"], other["api_worker"])
        for other in same_round
        if other is not record and open_at(other, sent)
    )
    idle = {
        replica: any(open_streams[(replica, worker)] == 0 for worker in processes)
        for replica, processes in workers.items()
    }
    if idle.get(record["replica"]):
        return FLEET_STATES[0]
    return FLEET_STATES[1] if any(idle.values()) else FLEET_STATES[2]


def fleet_state_rows(records, ttft_slo, tpot_slo):
    """Requests and SLO misses per fleet state (FLEET_STATES) when each was sent."""
    sent = [r for r in records if r.get("api_worker") is not None and r.get("e2e")]
    workers = defaultdict(set)
    for record in sent:
        workers[record["replica"]].add(record["api_worker"])
    by_round = defaultdict(list)
    for record in sent:
        by_round[record["round"]].append(record)
    rows = defaultdict(Counter)
    for same_round in by_round.values():
        for record in same_round:
            row = rows[fleet_state(record, same_round, workers)]
            row["requests"] += 1
            row["misses"] += misses_slo(record, ttft_slo, tpot_slo)
    return rows


def print_fleet_state(records, ttft_slo, tpot_slo):
    rows = fleet_state_rows(records, ttft_slo, tpot_slo)
    print("| when sent | requests | SLO misses |")
    print("|---|---:|---:|")
    for state in FLEET_STATES:
        print(f"| {state} | {rows[state]['requests']} | {rows[state]['misses']} |")


def print_summary(results, ttft_slo, tpot_slo):
    print("SLO misses by the fleet's state when each request was sent (requests / misses;")
    print("an API process is idle when no stream sent to it is open; `placement.py` has more):\n")
    print("| target | " + " | ".join(FLEET_STATES) + " |")
    print("|---|" + "---:|" * len(FLEET_STATES))
    for target in results["targets"]:
        records = [r for r in target["records"] if r.get("replica") is not None]
        rows = fleet_state_rows(records, ttft_slo, tpot_slo)
        cells = [f"{rows[state]['requests']} / {rows[state]['misses']}" for state in FLEET_STATES]
        print(f"| {target['name']} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()
