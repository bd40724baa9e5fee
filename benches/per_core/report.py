"""Report of benches/per_core.sh: wrk's figures and each proxy's CPU per request, as markdown.

    report.py OUT_DIR CLK_TCK CONNECTIONS SECONDS ROUNDS [EVENTS]

EVENTS: token events per response (the `sse` workload); 0 or absent for tiny requests.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

UNITS_US = {"us": 1.0, "ms": 1e3, "s": 1e6}
# laneway's short-entry strategy and the HAProxy mode that does the same on the wire.
PAIRS = [
    ("laneway-spread", "haproxy-keepalive"),
    ("laneway-force-close", "haproxy-httpclose"),
    ("baseline-spread", "haproxy-keepalive"),
    ("baseline-force-close", "haproxy-httpclose"),
    ("laneway-spread", "baseline-spread"),
    ("laneway-force-close", "baseline-force-close"),
]


def duration_us(text):
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    return float(match.group(1)) * UNITS_US[match.group(2)]


def parse_wrk(path):
    text = path.read_text()
    requests = int(re.search(r"(\d+) requests in", text).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    latency = {
        pct: duration_us(value)
        for pct, value in re.findall(r"^\s+(50|99)%\s+(\S+)", text, re.MULTILINE)
    }
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    socket = re.search(r"Socket errors: (.*)", text)
    return {
        "requests": requests,
        "rate": rate,
        "p50": latency.get("50"),
        "p99": latency.get("99"),
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": socket.group(1) if socket else "",
    }


def main():
    out, hz, connections, seconds, rounds = sys.argv[1:6]
    events = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    out, hz = Path(out), float(hz)
    ticks = {}
    order = []
    for line in (out / "cpu-ticks.txt").read_text().split("\n"):
        if not line.strip():
            continue
        name, round_no, user, system = line.split()
        ticks[(name, int(round_no))] = (int(user), int(system))
        if name not in order:
            order.append(name)
    runs = defaultdict(list)
    for name in order:
        for round_no in range(1, int(rounds) + 1):
            figures = parse_wrk(out / f"{name}-r{round_no}.txt")
            user, system = ticks[(name, round_no)]
            figures["cpu_us"] = (user + system) * 1e6 / hz
            figures["user_us"] = user * 1e6 / hz
            runs[name].append(figures)

    workload = (f"streamed completions of {events} token events" if events
                else "tiny non-streaming chat requests")
    print(f"wrk -t1 -c{connections} -d{seconds}s, {workload}, {rounds} interleaved rounds; "
          "proxies on core 1, stub and wrk on core 0.\n")
    print("| target | req/s (mean) | req/s per round | p50 (us) | p99 (us) | "
          "CPU us per request | of it user | errors |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    means = {}
    cpu_per_request = {}
    for name in order:
        rows = runs[name]
        mean = sum(r["rate"] for r in rows) / len(rows)
        means[name] = mean
        requests = sum(r["requests"] for r in rows)
        cpu = sum(r["cpu_us"] for r in rows)
        cpu_cell = "-" if name == "direct" else f"{cpu / max(requests, 1):.1f}"
        user = sum(r["user_us"] for r in rows)
        user_cell = "-" if name == "direct" else f"{user / max(requests, 1):.1f}"
        if name != "direct":
            cpu_per_request[name] = cpu / max(requests, 1)
        p50 = max(r["p50"] or 0 for r in rows)
        p99 = max(r["p99"] or 0 for r in rows)
        errors = sum(r["non_2xx"] for r in rows)
        socket = "; ".join(r["socket_errors"] for r in rows if r["socket_errors"])
        per_round = " ".join(f"{r['rate']:.0f}" for r in rows)
        print(f"| {name} | {mean:,.0f} | {per_round} | {p50:.0f} | {p99:.0f} | {cpu_cell} | "
              f"{user_cell} | {errors} non-2xx{(' ' + socket) if socket else ''} |")
    if events:
        print(f"\nCPU per token event (the request's own cost included, {events} events):\n")
        print("| proxy | CPU us per event |")
        print("|---|---:|")
        for name, cpu in cpu_per_request.items():
            print(f"| {name} | {cpu / events:.2f} |")
    print("\nlaneway against the HAProxy mode that does the same on the wire, and against the "
          "baseline build if one ran (req/s: higher is better; CPU per request: lower is "
          "better):\n")
    print("| target | against | req/s ratio | CPU per request ratio |")
    print("|---|---|---:|---:|")
    for ours, theirs in PAIRS:
        if ours in means and theirs in means:
            print(f"| {ours} | {theirs} | {means[ours] / means[theirs]:.2f}x | "
                  f"{cpu_per_request[ours] / cpu_per_request[theirs]:.2f}x |")


if __name__ == "__main__":
    main()
