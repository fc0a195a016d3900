#!/usr/bin/env python3
"""soak.csv -> an SVG of the run, written by hand (no matplotlib on the build machines).

Panels share the time axis: the daemon's resident memory, its open descriptors and connections,
device bytes, the honest answers served (cumulative, by kind), the daemon's error answers and
evictions (cumulative) and the hostile clients' rounds (cumulative). The warm-up, reference and last windows of the verdict are shaded.

  /usr/bin/python3 tests/soak/plot_soak.py soak-out/soak.csv docs/img/soak.svg ["TITLE"]
"""

import csv
import math
import sys
from xml.sax.saxutils import escape

WIDTH, PANEL_H, LEFT, RIGHT, TOP, GAP = 960, 150, 80, 200, 52, 46
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22")
MIB = 1048576.0


def nice_ticks(lo, hi, n=4):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks = [math.floor(lo / step) * step]
    while ticks[-1] < hi:
        ticks.append(round(ticks[0] + step * len(ticks), 10))
    return ticks


def panel(out, y0, t, series, label, tmax, windows):
    """series: [(name, values)]; draws axes, shaded windows, lines and a legend at y0."""
    vals = [v for _, vs in series for v in vs]
    lo, hi = min(vals + [0.0]), max(vals + [1e-9])
    ticks = nice_ticks(lo, hi)
    lo, hi = ticks[0], ticks[-1]
    x_of = lambda s: LEFT + (WIDTH - LEFT - RIGHT) * s / tmax  # noqa: E731
    y_of = lambda v: y0 + PANEL_H - PANEL_H * (v - lo) / (hi - lo)  # noqa: E731
    for a, b, colour in windows:
        out.append(f'<rect x="{x_of(a):.1f}" y="{y0}" width="{x_of(b) - x_of(a):.1f}" '
                   f'height="{PANEL_H}" fill="{colour}"/>')
    for v in ticks:
        y = y_of(v)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
    out.append(f'<rect x="{LEFT}" y="{y0}" width="{WIDTH - LEFT - RIGHT}" height="{PANEL_H}" '
               f'fill="none" stroke="#444"/>')
    out.append(f'<text x="{LEFT}" y="{y0 - 6}" font-weight="bold">{escape(label)}</text>')
    for i, (name, vs) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        pts = " ".join(f"{x_of(s):.1f},{y_of(v):.1f}" for s, v in zip(t, vs))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.4"/>')
        ly = y0 + 14 + 16 * i
        out.append(f'<line x1="{WIDTH - RIGHT + 12}" y1="{ly - 4}" x2="{WIDTH - RIGHT + 32}" '
                   f'y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{WIDTH - RIGHT + 38}" y="{ly}">{escape(name)} '
                   f'({vs[-1]:g})</text>')


def plot(csv_path, svg_path, title="krylovd soak", warmup=0.2):
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    num = lambda k: [float(r[k]) for r in rows]  # noqa: E731
    t = num("t_s")
    tmax = max(t[-1], 1.0)
    w = warmup * tmax
    windows = [(0, w, "#eeeeee"), (w, 2 * w, "#dbe9f6"), (tmax - w, tmax, "#fde3cc")]
    cols = rows[0].keys()
    panels = [
        ([("VmRSS", [v / MIB for v in num("rss_bytes")])]
         + ([("malloc in use", [v / MIB for v in num("malloc_in_use_bytes")]),
             ("kept (in use less clients')", [v / MIB for v in num("kept_bytes")])]
            if "kept_bytes" in cols else []), "krylovd host memory (MiB)"),
        ([("open fds", num("fds")), ("connections", num("connections"))],
         "open descriptors and connections"),
        ([("device_bytes_used", [v / MIB for v in num("device_bytes")])], "device memory (MiB)"),
        ([(k[3:], num(k)) for k in cols if k.startswith("ok_")],
         "honest answers checked (cumulative)"),
        ([(k[4:], num(k)) for k in cols if k.startswith("err_") and float(rows[-1][k]) > 0]
         + [(k[6:], num(k)) for k in cols if k.startswith("evict:")]
         + [(k, num(k)) for k in ("closed_slow",)],
         "daemon error answers, evictions, slow closes (cumulative)"),
        ([(k[2:], num(k)) for k in ("h_reader", "h_reader_cut", "h_slowloris", "h_bomb",
                                     "h_abort", "h_ghost", "h_unexpected") if k in cols],
         "hostile clients' rounds (cumulative; reader_cut: the daemon closed a never-reader)"),
    ]
    height = TOP + len(panels) * (PANEL_H + GAP) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
           f'<text x="{LEFT}" y="34">shaded: warm-up (grey), reference window (blue), '
           f'last window (orange); legends end with the last sample</text>']
    y = TOP
    for series, label in panels:
        if series:
            panel(out, y + 12, t, series, label, tmax, windows)
        y += PANEL_H + GAP
    span = "s" if tmax < 180 else "min"
    scale = 1 if span == "s" else 60
    for v in nice_ticks(0, tmax / scale, 6):
        if v * scale <= tmax:
            x = LEFT + (WIDTH - LEFT - RIGHT) * v * scale / tmax
            out.append(f'<text x="{x:.1f}" y="{y}" text-anchor="middle">{v:g} {span}</text>')
    out.append("</svg>")
    with open(svg_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: plot_soak.py SOAK_CSV OUT_SVG [TITLE]")
    plot(*sys.argv[1:])
