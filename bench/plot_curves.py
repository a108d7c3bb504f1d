#!/usr/bin/env python3
"""bench/plot_curves.py: several runs' loss curves in one SVG, no plotting library needed.

  python3 bench/plot_curves.py --out curves.svg [--title T] [--smooth 50] NAME=RUN/metrics.jsonl ...

Left panel: the training loss of every run (a moving average over --smooth steps, since a batch of 16
sequences is noisy). Right panel: the validation loss at every evaluation, with markers. Both share
the y axis so the two views can be read against each other.
"""
import argparse
import json
import math

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
           "#000000", "#aec7e8"]


def load(path):
    steps, loss, vsteps, vloss = [], [], [], []
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if isinstance(r.get("loss"), (int, float)):
            steps.append(r["step"])
            loss.append(r["loss"])
        if isinstance(r.get("val_loss"), (int, float)):
            vsteps.append(r["step"])
            vloss.append(r["val_loss"])
    return steps, loss, vsteps, vloss


def smooth(xs, k):
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= k:
            acc -= xs[i - k]
        out.append(acc / min(i + 1, k))
    return out


def nice_ticks(lo, hi, n=5):
    span = hi - lo or 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    t = math.ceil(lo / step) * step
    ticks = []
    while t <= hi + 1e-12:
        ticks.append(round(t, 10))
        t += step
    return ticks


def panel(x0, y0, w, h, title, series, xmax, ylo, yhi, markers):
    out = [f'<g transform="translate({x0},{y0})">',
           f'<rect width="{w}" height="{h}" fill="none" stroke="#888"/>',
           f'<text x="{w / 2}" y="-8" text-anchor="middle" font-size="13">{title}</text>']
    sx = lambda s: w * s / max(xmax, 1)
    sy = lambda v: h * (1 - (v - ylo) / (yhi - ylo))
    for t in nice_ticks(ylo, yhi):
        out.append(f'<line x1="0" x2="{w}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="-5" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="11">{t:g}</text>')
    for t in nice_ticks(0, xmax):
        out.append(f'<text x="{sx(t):.1f}" y="{h + 15}" text-anchor="middle" font-size="11">{t:g}</text>')
    out.append(f'<text x="{w / 2}" y="{h + 32}" text-anchor="middle" font-size="11">step</text>')
    for i, (xs, ys) in enumerate(series):
        c = COLOURS[i % len(COLOURS)]
        pts = " ".join(f"{sx(x):.1f},{sy(min(max(y, ylo), yhi)):.1f}" for x, y in zip(xs, ys))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.3" opacity="0.85"/>')
        if markers:
            for x, y in zip(xs, ys):
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{c}"/>')
    out.append("</g>")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="loss")
    ap.add_argument("--smooth", type=int, default=50)
    ap.add_argument("runs", nargs="+", help="NAME=path/to/metrics.jsonl")
    a = ap.parse_args()
    runs = []
    for spec in a.runs:
        name, _, path = spec.partition("=")
        runs.append((name, *load(path)))
    xmax = max(max(r[1] + r[3] or [1]) for r in runs)
    train = [(r[1], smooth(r[2], a.smooth)) for r in runs]
    val = [(r[3], r[4]) for r in runs]
    tail = [y for _, ys in train for y in ys[len(ys) // 20:]] + [y for _, ys in val for y in ys]
    ylo, yhi = min(tail), max(tail)
    pad = 0.05 * (yhi - ylo or 1)
    ylo, yhi = ylo - pad, yhi + pad
    W, pw, ph = 900, 360, 270
    H = 362 + 18 * ((len(runs) + 3) // 4)  # the legend: four runs a row
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="15">{a.title}</text>']
    svg += panel(60, 50, pw, ph, f"training loss (mean of {a.smooth} steps)", train, xmax, ylo, yhi, False)
    svg += panel(490, 50, pw, ph, "validation loss", val, xmax, ylo, yhi, True)
    for i, r in enumerate(runs):
        c = COLOURS[i % len(COLOURS)]
        last = f" (val {r[4][-1]:.4f})" if r[4] else ""
        x, y = 60 + (i % 4) * 210, 358 + 18 * (i // 4)
        svg.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{c}"/>')
        svg.append(f'<text x="{x + 16}" y="{y + 10}" font-size="12">{r[0]}{last}</text>')
    svg.append("</svg>")
    open(a.out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
