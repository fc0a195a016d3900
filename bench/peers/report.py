#!/usr/bin/env python3
"""Merge krylov-bench spmv --json with the peers' JSON lines (cusparse_spmv, cupy_spmv.py) into one
table with ratios, and check the SpMV targets:

  - geometric mean over the matrices of (our automatic choice's time / cuSPARSE's best of
    ALG_DEFAULT and CSR_ALG2) at most 0.8;
  - every matrix with >= 1M nonzeros at >= 80% of the measured copy bandwidth (effective, by the
    minimal-bytes model: nnz*(v+4) + (rows+1)*4 + cols*v + rows*v);
  - the automatic choice within 10% of the fastest format on >= 90% of the matrices;
  - the selection at most 50 SpMVs of the chosen format plus the transfer of the CSR arrays.

Times are medians of per-call timings ("ms"); the same ratios from back-to-back timings ("batch")
are shown beside them, since per-call CUDA event pairs include launch gaps that OpenCL profiling
events around the kernel do not.

    python3 bench/peers/report.py krylov.json cusparse.jsonl cupy.jsonl [--json OUT]
"""
import argparse
import json
import math


def lines(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    d = json.loads(line)
                    out[d["name"]] = d
    except FileNotFoundError:
        pass
    return out


def geomean(v):
    v = [x for x in v if x and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("krylov")
    ap.add_argument("cusparse")
    ap.add_argument("cupy")
    ap.add_argument("--json")
    a = ap.parse_args()
    kb = json.load(open(a.krylov))
    cs = lines(a.cusparse)
    cu = lines(a.cupy)
    copy = max([d.get("copy_gbs", 0) for d in cs.values()] or [0]) or kb.get("copy_gbs", 0)
    rows = []
    for m in kb["matrices"]:
        name, fm, sel = m["name"], m["formats"], m["select"]
        auto = sel["format"]
        # the matrix the selection keeps, reordered or not (gather and scatter included)
        am = m.get("auto") if m.get("auto", {}).get("median_ms") else fm[auto]
        t_auto = am.get("median_ms")
        b_auto = am.get("batch_ms")
        if m.get("reorder", "none") != "none":
            auto = f'{m["reorder"]}:{auto}'
        best = m["best"]
        t_best = fm[best]["median_ms"]
        rc = m.get("rcm", {})
        if rc.get("median_ms") and rc["median_ms"] < t_best:
            best, t_best = f'rcm:{m.get("rcm_format", "?")}', rc["median_ms"]
        c = cs.get(name, {})
        cb = min([c[k] for k in ("default_ms", "alg2_ms") if k in c] or [float("nan")])
        cbb = min([c[k] for k in ("default_batch_ms", "alg2_batch_ms") if k in c] or [float("nan")])
        p = cu.get(name, {})
        gbs = m["min_bytes"] / (t_auto * 1e-3) / 1e9 if t_auto else float("nan")
        budget = 50 * t_auto + sel["transfer_ms"] if t_auto else float("nan")
        rows.append(dict(
            name=name, rows=m["rows"], nnz=m["nnz"], auto=auto, t_auto=t_auto, b_auto=b_auto,
            best=best, t_best=t_best, within=t_auto / t_best if t_best else float("nan"),
            cusparse_default=c.get("default_ms"), cusparse_alg2=c.get("alg2_ms"),
            cusparse_best=cb, cusparse_best_batch=cbb, cupy=p.get("cupy_ms"),
            ratio=t_auto / cb if cb == cb else float("nan"),
            ratio_batch=b_auto / cbb if cbb == cbb and b_auto else float("nan"),
            gbs=gbs, copy_frac=gbs / copy if copy else float("nan"),
            cusparse_gbs=m["min_bytes"] / (cb * 1e-3) / 1e9 if cb == cb else float("nan"),
            select_ms=sel["total_ms"], select_cold_ms=m["select_cold"]["total_ms"],
            transfer_ms=sel["transfer_ms"], budget_ms=budget,
            select_ratio=sel["total_ms"] / budget if budget == budget else float("nan"),
            rel_err=am.get("rel_err"),
            cusparse_err=max(c.get("default_rel_err", 0), c.get("alg2_rel_err", 0)) if c else None))

    def f(x, w=8, p=4):
        return f"{x:{w}.{p}f}" if isinstance(x, (int, float)) and x == x else " " * (w - 1) + "-"

    hdr = (f"{'matrix':<22}{'nnz':>10} {'auto':<17}{'ours ms':>9}{'fastest':>22}{'cuSP def':>9}"
           f"{'cuSP alg2':>10}{'CuPy':>9}{'ours/cuSP':>10}{'(batch)':>8}{'GB/s':>7}{'%copy':>6}"
           f"{'select/budget ms':>19}")
    out = [f"device: {kb['device']} ({kb['platform']}, driver {kb['driver']}); {kb['dtype']}; "
           f"copy bandwidth {copy:.0f} GB/s (cudaMemcpy D2D, read+write); "
           f"OpenCL copy {kb.get('copy_gbs', 0):.0f} GB/s", hdr, "-" * len(hdr)]
    for r in rows:
        fastest = f"{r['best']} {r['t_best']:.4f}"
        out.append(
            f"{r['name']:<22}{r['nnz']:>10} {r['auto']:<17}{f(r['t_auto'], 9)}{fastest:>22}"
            f"{f(r['cusparse_default'], 9)}{f(r['cusparse_alg2'], 10)}{f(r['cupy'], 9)}"
            f"{f(r['ratio'], 10, 3)}{f(r['ratio_batch'], 8, 3)}{f(r['gbs'], 7, 0)}"
            f"{f(100 * r['copy_frac'], 6, 0)}{r['select_ms']:>9.2f}/{r['budget_ms']:<9.2f}")
    diag = [r for r in rows if r["name"].startswith("local_")]  # diagnostics, not the set
    rows = [r for r in rows if r not in diag]
    g = geomean([r["ratio"] for r in rows])
    gb = geomean([r["ratio_batch"] for r in rows])
    big = [r for r in rows if r["nnz"] >= 1_000_000]
    big_ok = [r for r in big if r["copy_frac"] >= 0.8]
    within = [r for r in rows if r["within"] <= 1.10]
    sel_ok = [r for r in rows if r["select_ratio"] <= 1.0]
    summary = {
        "geomean_ratio": g, "geomean_ratio_batch": gb,
        "big_at_80pct_copy": f"{len(big_ok)}/{len(big)}",
        "auto_within_10pct": f"{len(within)}/{len(rows)}",
        "selection_within_budget": f"{len(sel_ok)}/{len(rows)}",
    }
    out.append("")
    if diag:
        out.append("diagnostics (not in the benchmark set): " + ", ".join(
            f"{r['name']} {r['auto']} {r['t_auto']:.4f} ms = {r['gbs']:.0f} GB/s" for r in diag))
    out.append(f"geomean ours/cuSPARSE best-of-two: {g:.3f} per call (target <= 0.8), "
               f"{gb:.3f} back to back")
    out.append(f">= 1M nnz at >= 80% of copy bandwidth: {summary['big_at_80pct_copy']} "
               + ", ".join(f"{r['name']} {100 * r['copy_frac']:.0f}%" for r in big))
    out.append(f"auto within 10% of the fastest format: {summary['auto_within_10pct']} "
               "(target >= 90%); misses: " + (", ".join(
                   f"{r['name']} {r['auto']} {r['within']:.2f}x of {r['best']}"
                   for r in rows if r not in within) or "none"))
    out.append(f"selection <= 50 SpMV + transfer: {summary['selection_within_budget']}; "
               "misses: " + (", ".join(f"{r['name']} {r['select_ratio']:.1f}x"
                                       for r in rows if r not in sel_ok) or "none"))
    print("\n".join(out))
    if a.json:
        with open(a.json, "w") as fo:
            json.dump({"device": kb["device"], "driver": kb["driver"], "copy_gbs": copy,
                       "rows": rows, "diagnostics": diag, "summary": summary}, fo, indent=1)


if __name__ == "__main__":
    main()
