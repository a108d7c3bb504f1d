#!/usr/bin/env python3
"""bench/plot_dp_algos.py: issue 23's curves, no plotting library needed.

  python3 bench/plot_dp_algos.py --out dp_algos.svg [--title T] NAME=RUN/metrics.jsonl ...

Left: validation loss against steps. Right: validation loss against the bytes one data-parallel rank
sent in its group so far (the sum of metrics.jsonl's bytes_sent up to that step), on a log scale.
Also prints the table: final validation loss, total bytes per rank, and each against the first run's.
"""
import argparse
import json
import math
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_curves import COLOURS, nice_ticks as ticks  # noqa: E402



def load(path):
    steps, vals, sent = [], [], []
    total = 0
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        total += int(r.get("bytes_sent", 0))
        if isinstance(r.get("val_loss"), (int, float)):
            steps.append(r["step"] + 1)
            vals.append(r["val_loss"])
            sent.append(total)
    return steps, vals, sent, total


def panel(x0, y0, w, h, title, xlabel, series, xlo, xhi, ylo, yhi, logx):
    fx = (lambda v: math.log10(max(v, 1.0))) if logx else (lambda v: v)
    lo, hi = fx(xlo), fx(xhi)
    sx = lambda v: w * (fx(v) - lo) / ((hi - lo) or 1)
    sy = lambda v: h * (1 - (v - ylo) / (yhi - ylo))
    out = [f'<g transform="translate({x0},{y0})">', f'<rect width="{w}" height="{h}" fill="none" stroke="#888"/>',
           f'<text x="{w / 2}" y="-8" text-anchor="middle" font-size="13">{title}</text>']
    for t in ticks(ylo, yhi):
        out.append(f'<line x1="0" x2="{w}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="-5" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="11">{t:g}</text>')
    if logx:
        for e in range(math.floor(lo), math.ceil(hi) + 1):
            if lo - 1e-9 <= e <= hi + 1e-9:
                px = w * (e - lo) / ((hi - lo) or 1)
                out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="0" y2="{h}" stroke="#eee"/>')
                out.append(f'<text x="{px:.1f}" y="{h + 15}" text-anchor="middle" font-size="11">1e{e}</text>')
    else:
        for t in ticks(xlo, xhi):
            out.append(f'<text x="{sx(t):.1f}" y="{h + 15}" text-anchor="middle" font-size="11">{t:g}</text>')
    out.append(f'<text x="{w / 2}" y="{h + 32}" text-anchor="middle" font-size="11">{xlabel}</text>')
    for i, (xs, ys) in enumerate(series):
        c = COLOURS[i % len(COLOURS)]
        pts = " ".join(f"{sx(x):.1f},{sy(min(max(y, ylo), yhi)):.1f}" for x, y in zip(xs, ys) if not logx or x > 0)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.4" opacity="0.9"/>')
        for x, y in zip(xs, ys):
            if not logx or x > 0:
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(min(max(y, ylo), yhi)):.1f}" r="2.2" fill="{c}"/>')
    out.append("</g>")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="data-parallel algorithms")
    ap.add_argument("runs", nargs="+", help="NAME=path/to/metrics.jsonl")
    a = ap.parse_args()
    runs = []
    for spec in a.runs:
        name, _, path = spec.partition("=")
        runs.append((name, *load(path)))
    ys = [v for r in runs for v in r[2]]
    ylo, yhi = min(ys), max(ys)
    ylo, yhi = ylo - 0.05 * (yhi - ylo or 1), min(yhi, ylo + 3.0)
    xmax = max(max(r[1] or [1]) for r in runs)
    bmin = min(b for r in runs for b in r[3] if b > 0) if any(b > 0 for r in runs for b in r[3]) else 1
    bmax = max(max(r[3] or [1]) for r in runs)
    W, pw, ph = 960, 390, 300
    rows = (len(runs) + 2) // 3
    H = 60 + ph + 50 + 18 * rows + 10
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="15">{a.title}</text>']
    svg += panel(60, 50, pw, ph, "validation loss against steps", "step",
                 [(r[1], r[2]) for r in runs], 0, xmax, ylo, yhi, False)
    svg += panel(530, 50, pw, ph, "validation loss against bytes sent per rank", "bytes sent by one rank (log)",
                 [(r[3], r[2]) for r in runs], bmin, bmax, ylo, yhi, True)
    for i, r in enumerate(runs):
        c = COLOURS[i % len(COLOURS)]
        x, y = 60 + (i % 3) * 300, 50 + ph + 50 + 18 * (i // 3)
        svg.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{c}"/>')
        last = f" (val {r[2][-1]:.3f})" if r[2] else ""
        svg.append(f'<text x="{x + 16}" y="{y}" font-size="12">{r[0]}{last}</text>')
    svg.append("</svg>")
    open(a.out, "w").write("\n".join(svg) + "\n")
    base_v, base_b = runs[0][2][-1], runs[0][4]
    print(f"{'run':28} {'final val':>9} {'vs first':>8} {'MB sent/rank':>13} {'fewer bytes':>11}")
    for r in runs:
        v, b = r[2][-1], r[4]
        print(f"{r[0]:28} {v:9.4f} {100 * (v - base_v) / base_v:+7.2f}% {b / 1e6:13.2f} "
              f"{(base_b / b if b else float('inf')):10.1f}x")


if __name__ == "__main__":
    main()
