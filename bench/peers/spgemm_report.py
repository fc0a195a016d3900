#!/usr/bin/env python3
"""Merge krylov-bench spgemm --json with the SpGEMM peers' JSON lines (cusparse_spgemm,
cupy_spgemm.py) into one table, one row per (matrix, op, dtype), and issue 13's target: the
geometric mean over the rows of (krylovd's time / cuSPARSE's) at most 1.0, memory peaks beside.

    python3 bench/peers/spgemm_report.py KRYLOV.jsonl CUSPARSE.jsonl CUPY.jsonl [--json OUT]
                                         [--note TEXT]...

Every input is JSON lines (a missing file or a line that is not JSON counts as no line). Keys read:
  krylov-bench spgemm --json: matrix, op, dtype, rows, nnz_a, products, nnz_c, median_ms, min_ms,
      peak_bytes, checksum ("matrix" may be the spec, "lap3d:64", or its file name, "lap3d_64");
  cusparse_spgemm: the same keys for its fastest algorithm, plus "alg" and "alloc" (lines with a
      cudaMallocAsync pool fill the "cuSP pool" column, the others the cuSPARSE one);
  cupy_spgemm.py: the same keys.
Times are medians of whole products (allocation of buffers and C included). "cuSPARSE" is the
fastest of the algorithms tried with cudaMalloc as NVIDIA's samples do; "cuSP pool" is the default
algorithm with a stream-ordered pool kept warm (allocation nearly free, as in CuPy). "ck" compares
krylovd's checksum (sum of C's values) with cuSPARSE's (CuPy's if cuSPARSE has none), relative;
"=" where nnz(C) agrees too, "!" where nnz(C) differs (then the two did not multiply the same
matrices, or one is wrong).
"""
import argparse
import json
import math
import os
import re


def key_name(m):
    """kd_bench_matrix_name: "tests/matrices/arrow.mtx" -> "arrow", "lap2d:1024" -> "lap2d_1024"."""
    b = os.path.basename(str(m))
    for ext in (".mtx", ".csr"):
        if ext in b:
            b = b[:b.index(ext)]
    return re.sub(r"[: ]", "_", b)


def lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except (FileNotFoundError, TypeError):
        pass
    return out


def by_key(rows):
    return {(key_name(d.get("matrix", "?")), d.get("op", "aa"), d.get("dtype", "float64")): d
            for d in rows}


def geomean(v):
    v = [x for x in v if x == x and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def num(d, k):
    x = d.get(k) if d else None
    return float(x) if isinstance(x, (int, float)) else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("krylov")
    ap.add_argument("cusparse")
    ap.add_argument("cupy")
    ap.add_argument("--json")
    ap.add_argument("--note", action="append", default=[])
    a = ap.parse_args()
    kb = by_key(lines(a.krylov))
    cs_all = lines(a.cusparse)
    cs = by_key([d for d in cs_all if "pool" not in d.get("alloc", "")])
    csp = by_key([d for d in cs_all if "pool" in d.get("alloc", "")])
    cu = by_key(lines(a.cupy))
    keys = list(dict.fromkeys(list(cs) + list(kb) + list(cu)))
    rows = []
    for k in keys:
        K, C, Cp, P = kb.get(k, {}), cs.get(k, {}), csp.get(k, {}), cu.get(k, {})
        t_k, t_c = num(K, "median_ms"), num(C, "median_ms")
        ref = C if "checksum" in C else P  # cuSPARSE's, else CuPy's
        ck_k, ck_c = num(K, "checksum"), num(ref, "checksum")
        nk, nc = K.get("nnz_c"), ref.get("nnz_c")
        ck = abs(ck_k - ck_c) / max(abs(ck_c), 1e-300) if ck_k == ck_k and ck_c == ck_c else None
        rows.append(dict(
            matrix=k[0], op=k[1], dtype=k[2],
            nnz_a=K.get("nnz_a") or C.get("nnz_a") or P.get("nnz_a"),
            products=K.get("products") or C.get("products") or P.get("products"),
            nnz_c=nc if nc is not None else nk,
            nnz_agree=None if nk is None or nc is None else nk == nc,
            krylov_ms=t_k, cusparse_ms=t_c, cusparse_alg=C.get("alg"),
            cusparse_kernels_ms=num(C, "kernels_ms"), cusparse_pool_ms=num(Cp, "median_ms"),
            cupy_ms=num(P, "median_ms"),
            ratio=t_k / t_c if t_k == t_k and t_c == t_c else float("nan"),
            ratio_pool=t_k / num(Cp, "median_ms") if Cp and t_k == t_k else float("nan"),
            krylov_peak=num(K, "peak_bytes"), cusparse_peak=num(C, "peak_bytes"),
            cupy_peak=num(P, "peak_bytes"), checksum_rel_diff=ck,
            errors="; ".join(f"{w}: {d['error']}" for w, d in (("krylovd", K), ("cuSPARSE", C),
                                                              ("CuPy", P)) if d.get("error"))))

    def f(x, w, p=3):
        return f"{x:{w}.{p}f}" if isinstance(x, (int, float)) and x == x else " " * (w - 1) + "-"

    def mib(x, w=8):
        return f(x / 2**20, w, 1)

    hdr = (f"{'matrix':<21}{'op':<4}{'dtype':<8}{'nnz(A)':>10}{'nnz(C)':>11}{'krylovd':>9}"
           f"{'cuSPARSE':>9} {'alg':<8}{'cuSP pool':>10}{'CuPy':>8}{'kd/cuSP':>8}"
           f"{'MiB kd':>8}{'MiB cuSP':>9}{'MiB CuPy':>9}  ck")
    out = [hdr, "-" * len(hdr)]
    for r in rows:
        ck = "" if r["checksum_rel_diff"] is None else f"{r['checksum_rel_diff']:.0e}"
        agree = {None: " ", True: "=", False: "!"}[r["nnz_agree"]]
        out.append(
            f"{r['matrix'][:20]:<21}{r['op']:<4}{r['dtype'][:7]:<8}{r['nnz_a'] or 0:>10}"
            f"{r['nnz_c'] or 0:>11}{f(r['krylov_ms'], 9)}{f(r['cusparse_ms'], 9)} "
            f"{(r['cusparse_alg'] or '-'):<8}{f(r['cusparse_pool_ms'], 10)}{f(r['cupy_ms'], 8)}"
            f"{f(r['ratio'], 8, 2)}{mib(r['krylov_peak'])}{mib(r['cusparse_peak'], 9)}"
            f"{mib(r['cupy_peak'], 9)}  {agree}{ck}")
    for r in rows:
        if r["errors"]:
            out.append(f"  {r['matrix']} {r['op']} {r['dtype']}: {r['errors'][:300]}")
    g = geomean([r["ratio"] for r in rows])
    g64 = geomean([r["ratio"] for r in rows if r["dtype"] == "float64"])
    gp = geomean([r["ratio_pool"] for r in rows])
    per_op = {op: geomean([r["ratio"] for r in rows if r["op"] == op])
              for op in dict.fromkeys(r["op"] for r in rows)}
    both = sum(1 for r in rows if r["ratio"] == r["ratio"])
    summary = {"geomean_ratio": g, "geomean_ratio_float64": g64, "geomean_ratio_vs_pool": gp,
               "geomean_ratio_by_op": per_op, "rows_with_both": both, "rows": len(rows),
               "nnz_mismatch": [f"{r['matrix']} {r['op']} {r['dtype']}" for r in rows
                                if r["nnz_agree"] is False]}
    out.append("")
    out.extend(a.note)
    out.append(f"geomean krylovd/cuSPARSE (best algorithm, cudaMalloc): {g:.3f} over {both} of "
               f"{len(rows)} rows (target <= 1.0); float64 only {g64:.3f}; "
               + ", ".join(f"{op} {v:.3f}" for op, v in per_op.items())
               + f"; against cuSPARSE default with a warm pool {gp:.3f}")
    if summary["nnz_mismatch"]:
        out.append("nnz(C) differs from cuSPARSE's: " + ", ".join(summary["nnz_mismatch"]))
    print("\n".join(out))
    if a.json:
        with open(a.json, "w") as fo:
            json.dump({"rows": rows, "summary": summary, "notes": a.note}, fo, indent=1)


if __name__ == "__main__":
    main()
