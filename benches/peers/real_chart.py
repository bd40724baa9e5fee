#!/usr/bin/env python3
"""An SVG bar chart of one figure per target from benches/peers/real_client.py's JSON: the
mean over the rounds as a bar, the spread over the rounds (min-max) as a whisker.

    real_chart.py FILE.json OUT.svg [--figure hit_ratio|ttft_p90|goodput]

Standard library only, like the client.
"""

import argparse
import json
from xml.sax.saxutils import escape

FIGURES = {
    "hit_ratio": ("hit ratio (cached / prompt tokens)", 1.0, "{:.3f}"),
    "ttft_p90": ("TTFT p90 (ms)", 1000.0, "{:.0f}"),
    "goodput": ("goodput", 1.0, "{:.3f}"),
}
ROW, LABEL_W, BAR_W, TOP = 30, 210, 420, 50


def chart(doc, figure):
    title, scale, fmt = FIGURES[figure]
    rows = []
    for target in doc["targets"]:
        values = [r[figure] * scale for r in doc["runs"] if r["target"] == target and r.get(figure) is not None]
        if values:
            rows.append((target, sum(values) / len(values), min(values), max(values)))
    top = max(high for _, _, _, high in rows) or 1.0
    width, height = LABEL_W + BAR_W + 90, TOP + ROW * len(rows) + 20
    x = lambda v: LABEL_W + BAR_W * v / top
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14">{escape(doc["name"])}: {escape(title)}</text>',
        f'<text x="10" y="36" fill="#555">{escape(doc.get("description", ""))}; bar: mean of '
        f'{len(doc["runs"]) // max(len(rows), 1)} rounds, whisker: min-max</text>',
    ]
    for i, (target, mean, low, high) in enumerate(rows):
        y = TOP + i * ROW
        out += [
            f'<text x="{LABEL_W - 8}" y="{y + 18}" text-anchor="end">{escape(target)}</text>',
            f'<rect x="{LABEL_W}" y="{y + 4}" width="{x(mean) - LABEL_W:.1f}" height="{ROW - 10}" '
            f'fill="{"#2b6cb0" if target.startswith("laneway") else "#a0aec0"}"/>',
            f'<line x1="{x(low):.1f}" x2="{x(high):.1f}" y1="{y + 14}" y2="{y + 14}" stroke="black"/>',
            f'<line x1="{x(low):.1f}" x2="{x(low):.1f}" y1="{y + 9}" y2="{y + 19}" stroke="black"/>',
            f'<line x1="{x(high):.1f}" x2="{x(high):.1f}" y1="{y + 9}" y2="{y + 19}" stroke="black"/>',
            f'<text x="{x(high) + 6:.1f}" y="{y + 18}">{fmt.format(mean)}</text>',
        ]
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json")
    p.add_argument("out")
    p.add_argument("--figure", choices=sorted(FIGURES), default="hit_ratio")
    a = p.parse_args()
    with open(a.json) as f:
        doc = json.load(f)
    with open(a.out, "w") as f:
        f.write(chart(doc, a.figure))


if __name__ == "__main__":
    main()
