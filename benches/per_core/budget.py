"""Per-request budget from `callgrind_annotate --inclusive=yes` output, as markdown.

    budget.py INCLUSIVE_TXT REQUESTS STRATEGY

A step none of whose functions ran on its own reads "not seen": never called, or inlined into
its caller (the release profile's fat LTO inlines several); a build with `CARGO_PROFILE_RELEASE_LTO=false
CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16` attributes every step.

Each step is the largest inclusive count among the lines of the functions its pattern matches (a step's
functions call each other, so counts are not summed); steps overlap (the request path holds
most of the others), so the shares do not add up to 100%.
"""

import re
import sys

# (step, regular expression on the function's name)
STEPS = [
    ("client connection (its task: read, parse, handle, write)",
     r"hyper_util::server::conn::auto::Connection<.*> as core::future::future::Future>::poll$"
     r"|laneway::gateway::listen::serve::\{\{closure\}\}::\{\{closure\}\}$"),
    ("  request head parse (own HTTP/1.1 server)", r"listen::h1::request::parse$"),
    ("  response head encode (own HTTP/1.1 server)", r"listen::h1::response::encode_head$"),
    ("  request handler (classify -> forward -> respond)",
     r"<tracing::instrument::Instrumented<T> as core::future::future::Future>::poll$"),
    ("    request id", r"request_id::accept_or_create$"),
    ("    classify (JSON check, model, prompt estimate)", r"classify::classify_with_model$"),
    ("    admission and pick", r"admission::Admission::try_admit$"),
    ("    forward (pick, rewrite, send, wait for the head)",
     r"laneway::gateway::listen::dispatch::pick_and_forward::\{\{closure\}\}$"
     r"|laneway::gateway::listen::attempts::forward::\{\{closure\}\}$"),
    ("      upstream request rewrite", r"forward::request::to_upstream$"),
    ("      upstream exchange (own client: write, read, parse the head)",
     r"forward::wire::exchange::\{\{closure\}\}$"),
    ("      hop-by-hop header strip (both ways)", r"forward::request::strip_hop_by_hop$"),
    ("      respond (response head, observer set-up)", r"listen::respond::respond$"),
    ("  response body relay and observation",
     r"observe::body::ObservedBody<B> as http_body::Body>::poll_frame$"),
    ("    recorder finish (metrics, usage, canary hand-off)",
     r"observe::recorder::Recorder::finish$"),
    ("canary recorder task", r"laneway::canary::RecorderState::run"),
    ("Prometheus label lookups (with_label_values)",
     r"prometheus::vec::MetricVec<T>::with_label_values$"),
    ("tracing spans", r"tracing_core::dispatcher::Dispatch::new_span$|tracing::span::Span::new$"),
    ("allocation (alloc + realloc + free)", r"__rustc::__rust_(alloc|dealloc|realloc)$"),
    ("memcpy / memmove", r"__mem(cpy|move)_avx_unaligned_erms$"),
]

LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$")


def main():
    path, requests, strategy = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rows = []
    total = None
    for line in open(path, encoding="utf-8", errors="replace"):
        match = LINE.match(line)
        if not match:
            continue
        count = int(match.group(1).replace(",", ""))
        text = match.group(2)
        if text.startswith("PROGRAM TOTALS"):
            total = count
            continue
        # "file:function [object]": inlined code is listed again under the file it came
        # from, within its caller's count, so a step takes the largest line, never a sum.
        function = re.sub(r"\s+\[[^\]]*\]\s*$", "", text).split(":", 1)[-1].strip()
        rows.append((count, function))
    if total is None:
        sys.exit("no PROGRAM TOTALS in the callgrind output")
    print(f"Short entry `{strategy}`, {requests} tiny chat requests over 4 keep-alive "
          "connections, user-space instructions (callgrind):\n")
    print(f"**{total / requests:,.0f} instructions per request** in all "
          "(scrapes and health checks off during the count).\n")
    print("| step | instructions per request | share |")
    print("|---|---:|---:|")
    for name, pattern in STEPS:
        regex = re.compile(pattern)
        if name.startswith("allocation"):
            # Three functions that do not call each other: the largest line of each.
            largest = {}
            for count, function in rows:
                if regex.search(function):
                    largest[function] = max(largest.get(function, 0), count)
            count = sum(largest.values()) if largest else None
        else:
            count = max((c for c, f in rows if regex.search(f)), default=None)
        label = name.replace("  ", "&nbsp;&nbsp;")
        if count is None:
            # No function of the step ran on its own: never called, or inlined into its
            # caller (the release profile's LTO inlines several), whose line counts it.
            print(f"| {label} | not seen | - |")
            continue
        print(f"| {label} | {count / requests:,.0f} | {100 * count / total:.1f}% |")


if __name__ == "__main__":
    main()
