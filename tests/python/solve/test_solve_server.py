#!/usr/bin/env python3
"""The solve method end to end with several right-hand sides and Jacobi PCG (docs/PROTOCOL.md):
a real krylovd on loopback, msgpack-rpc over a socket (tests/python/lib/kd_rpc.py).

- nrhs = 4 in one request (random, b = 0, NaN in b, a scaled column), cg and pcg: status,
  iterations, residual_norm, relative_residual, message and history come back as lists of 4;
  b = 0 gives x = 0 (converged, 0 iterations); NaN gives non_finite naming b; each converged
  column meets rtol by numpy's measure; x0 is taken per column.
- pcg with preconditioner "none" is CG; "jacobi" with method cg is BAD_REQUEST.
- pcg on a matrix with a missing diagonal entry is BAD_REQUEST naming the row; with a negative
  one NOT_SPD; with NaN on the diagonal BAD_REQUEST; CG on the same matrix is not refused.
- sd converges; the indefinite dwt_878 (pattern values 1.0) breaks down, saying it is not SPD.
- progress: true with nrhs = 2 sends solve.progress notifications naming the request and a
  column in range.

Usage: test_solve_server.py --bin-dir DIR --matrices DIR   (needs numpy, scipy and msgpack: deploy/install-deps.sh)
"""
import os
import sys

import numpy as np
import scipy.io
import scipy.sparse as sp
import msgpack  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import kd_rpc  # noqa: E402

ARGS = None  # set by kd_rpc.run_tests
check = kd_rpc.check


def laplacian_2d(nx):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(nx, nx))
    eye = sp.identity(nx)
    return (sp.kron(eye, t) + sp.kron(t, eye)).tocsr()


def expect_error(fn, code, text):
    try:
        fn()
    except kd_rpc.RpcError as e:
        print(f"  {e.code}: {e.message}")
        check(e.code == code, f"expected {code}, got {e.code}: {e.message}")
        check(text in e.message, f"'{text}' not in '{e.message}'")
        return
    check(False, f"expected {code} ({text}), got a result")


def test_several_right_hand_sides(client):
    a = laplacian_2d(30)
    n = a.shape[0]
    rng = np.random.default_rng(11)
    b = np.column_stack([rng.uniform(-1, 1, n), np.zeros(n), rng.uniform(-1, 1, n),
                         1e4 * rng.uniform(-1, 1, n)])
    b[5, 2] = np.nan
    x0 = np.zeros((n, 4))
    x0[:, 3] = rng.uniform(-1, 1, n)
    mid = client.put_csr(a)["id"]
    for method in ("cg", "pcg"):
        x, res = client.solve(mid, b, x0=x0, method=method, rtol=1e-9, history=True,
                              check_every=5)
        print(f"  {method}: {res['status']} {res['iterations']}")
        for key in ("status", "iterations", "residual_norm", "relative_residual", "message",
                    "history"):
            check(isinstance(res[key], list) and len(res[key]) == 4, f"{key} is a list of 4")
        check(res["status"][1] == "converged" and res["iterations"][1] == 0, "b = 0: converged at 0")
        check(np.all(x[:, 1] == 0.0), "b = 0: x = 0")
        check(res["status"][2] == "non_finite" and "b[5] = nan" in res["message"][2],
              f"NaN column: {res['status'][2]} {res['message'][2]}")
        for j in (0, 3):
            rr = np.linalg.norm(b[:, j] - a @ x[:, j]) / np.linalg.norm(b[:, j])
            check(res["status"][j] == "converged", f"column {j}: {res['status'][j]}")
            check(rr <= 1e-9 * 1.01, f"column {j}: relres {rr:.3g}")
            check(len(res["history"][j]) >= 2, f"column {j}: history {len(res['history'][j])}")
            check(res["message"][j] == "", f"column {j}: message '{res['message'][j]}'")
    # One column alone gives the same result as in the batch.
    x1, r1 = client.solve(mid, b[:, 0], method="cg", rtol=1e-9)
    xb, rb = client.solve(mid, b[:, :2], method="cg", rtol=1e-9)
    check(r1["iterations"] == rb["iterations"][0], f"alone {r1['iterations']} vs batch {rb['iterations'][0]}")
    check(np.allclose(x1, xb[:, 0], rtol=1e-12, atol=1e-14), "alone and in a batch agree")


def test_preconditioner_choice(client):
    a = laplacian_2d(20)
    s = sp.diags(10.0 ** np.random.default_rng(2).uniform(-1, 1, a.shape[0]))
    a = (s @ a @ s).tocsr()
    b = np.random.default_rng(3).uniform(-1, 1, a.shape[0])
    mid = client.put_csr(a)["id"]
    _, cg = client.solve(mid, b, method="cg", rtol=1e-8)
    _, none = client.solve(mid, b, method="pcg", preconditioner="none", rtol=1e-8)
    _, jac = client.solve(mid, b, method="pcg", preconditioner="jacobi", rtol=1e-8)
    _, dflt = client.solve(mid, b, method="pcg", rtol=1e-8)
    print(f"  cg {cg['iterations']}, pcg none {none['iterations']}, pcg jacobi "
          f"{jac['iterations']}, pcg {dflt['iterations']}")
    check(none["iterations"] == cg["iterations"], "pcg with preconditioner none is cg")
    check(jac["iterations"] == dflt["iterations"], "pcg defaults to jacobi")
    check(jac["iterations"] * 2 < cg["iterations"], "jacobi helps on a badly scaled matrix")
    _, cgj = client.solve(mid, b, method="cg", preconditioner="jacobi", rtol=1e-8)
    check(cgj["iterations"] == jac["iterations"] and cgj["method"] == "cg",
          "cg with preconditioner jacobi is pcg")
    check(jac["method"] == "cg" and jac["preconditioner"] == "jacobi",
          "the reply names the method and preconditioner pcg came to")


def test_pcg_bad_diagonal(client):
    a = laplacian_2d(6).tolil()
    b = np.ones(a.shape[0])
    missing = a.copy()
    missing[9, 9] = 0.0
    missing = missing.tocsr()
    missing.eliminate_zeros()
    negative = a.copy()
    negative[4, 4] = -3.0
    nan = a.copy()
    nan[2, 2] = np.nan
    cases = [(missing.tocsr(), "BAD_REQUEST", "diagonal entry of row 9 is 0 (zero or missing)"),
             (negative.tocsr(), "NOT_SPD", "row 4 is -3 < 0: the matrix is not symmetric positive definite"),
             (nan.tocsr(), "BAD_REQUEST", "row 2 is nan (not finite)")]
    for m, code, text in cases:
        mid = client.put_csr(m)["id"]
        expect_error(lambda: client.solve(mid, b, method="pcg"), code, text)
        _, res = client.solve(mid, b, method="cg", maxiter=50)  # cg is not refused
        check(res["status"] in ("converged", "max_iterations", "breakdown", "non_finite"),
              f"cg on the same matrix: {res['status']}")


def test_sd_and_breakdown(client):
    a = laplacian_2d(10)
    b = np.random.default_rng(5).uniform(-1, 1, a.shape[0])
    mid = client.put_csr(a)["id"]
    x, res = client.solve(mid, b, method="sd", rtol=1e-6, maxiter=20000)
    rr = np.linalg.norm(b - a @ x) / np.linalg.norm(b)
    print(f"  sd: {res['status']} in {res['iterations']} (relres {rr:.3g})")
    check(res["status"] == "converged" and rr <= 1e-6 * 1.01, f"sd: {res['status']} {rr:.3g}")
    dwt = scipy.io.mmread(os.path.join(ARGS.matrices, "dwt_878.mtx")).tocsr()
    mid = client.put_csr(dwt)["id"]
    _, res = client.solve(mid, np.ones(dwt.shape[0]), method="cg", rtol=1e-10)
    print(f"  dwt_878 cg: {res['status']}: {res['message']}")
    check(res["status"] == "breakdown", f"dwt_878 cg: {res['status']}")
    check("not positive definite; try method minres" in res["message"], res["message"])


def test_progress_notifications(client):
    a = laplacian_2d(60)
    b = np.random.default_rng(8).uniform(-1, 1, (a.shape[0], 2))
    mid = client.put_csr(a)["id"]
    client.notifications.clear()
    _, res = client.solve(mid, b, method="cg", rtol=1e-10, progress=True, check_every=1)
    msgid = client.msgid
    notes = [n for n in client.notifications if n[1] == "solve.progress"]
    print(f"  {len(notes)} solve.progress notification(s); first {notes[0] if notes else None}")
    check(len(notes) >= 1, "at least one solve.progress")
    for n in notes:
        p = n[2][0]
        check(p["msgid"] == msgid, f"progress msgid {p['msgid']} != {msgid}")
        check(p["rhs"] in (0, 1), f"progress rhs {p['rhs']}")
        check(p["iteration"] >= 0 and p["residual"] >= 0.0, f"progress {p}")
    check(res["status"] == ["converged", "converged"], f"{res['status']}")


if __name__ == "__main__":
    sys.exit(kd_rpc.run_tests(globals()))
