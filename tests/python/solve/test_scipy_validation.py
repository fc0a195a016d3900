#!/usr/bin/env python3
"""krylovd's CG and Jacobi-PCG against SciPy, end to end.

A real krylovd on loopback (tests/python/lib/kd_rpc.py), msgpack-rpc over a socket, on the real SPD
matrix 494_bus (condition number about 2.4e6), on dwt_878 + 4I (the pattern file's values are
1.0, which makes dwt_878 itself indefinite; the shift makes it SPD), and on a generated 2-D
Laplacian. For each: the solve converges to the same tolerance as scipy.sparse.linalg.cg
(||b - A x|| <= rtol ||b||, checked here in double), takes a number of iterations within 10% of
SciPy's (two, for small counts), and its x agrees with SciPy's and with the direct solution to
the accuracy the condition number allows (||x - x*|| / ||x*|| <= kappa * rtol). Several
right-hand sides in one request are each held to the same. float32 converges to its own rtol.

Usage: test_scipy_validation.py --bin-dir DIR --matrices DIR   (needs numpy, scipy and msgpack: deploy/install-deps.sh)
"""
import inspect
import os
import sys

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import msgpack  # noqa: F401  (kd_rpc needs it)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import kd_rpc  # noqa: E402

ARGS = None  # set by kd_rpc.run_tests
check = kd_rpc.check


def scipy_cg(a, b, rtol, m=None, maxiter=None):
    """SciPy's cg with ||r|| <= rtol ||b|| (its tol / rtol name differs by version); returns
    (x, info, iterations)."""
    count = [0]

    def cb(_xk):
        count[0] += 1

    params = inspect.signature(sla.cg).parameters
    kw = {"rtol": rtol} if "rtol" in params else {"tol": rtol}
    x, info = sla.cg(a, b, atol=0.0, M=m, maxiter=maxiter, callback=cb, **kw)
    return x, info, count[0]


def relres(a, x, b):
    return np.linalg.norm(b - a @ x) / np.linalg.norm(b)


def laplacian_2d(nx):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(nx, nx))
    eye = sp.identity(nx)
    return (sp.kron(eye, t) + sp.kron(t, eye)).tocsr()


def compare(client, name, a, b, rtol, method="cg", kappa=None):
    """Solve with krylovd and SciPy (M = Jacobi for pcg) and hold ours to SciPy's."""
    mid = client.put_csr(a)["id"]
    x, res = client.solve(mid, b, method=method, rtol=rtol, history=True)
    m = sp.diags(1.0 / a.diagonal()) if method == "pcg" else None
    xs, info, its = scipy_cg(a, b, rtol, m=m, maxiter=10 * a.shape[0])
    ours = res["iterations"]
    rr = relres(a, x, b)
    print(f"  {name:<24} {method:<3}: krylovd {res['status']} in {ours:5d} iterations "
          f"(relres {rr:.3g}); scipy info {info} in {its:5d} (relres {relres(a, xs, b):.3g})")
    check(res["status"] == "converged", f"{name} {method}: status {res['status']} {res['message']}")
    check(info == 0, f"{name} {method}: scipy did not converge ({info})")
    check(rr <= rtol * 1.01, f"{name} {method}: ||b - Ax|| / ||b|| = {rr:.3g} > {rtol}")
    check(abs(res["relative_residual"] - rr) <= 0.05 * rr + 1e-15,
          f"{name} {method}: reported relative residual {res['relative_residual']:.3g} vs {rr:.3g}")
    check(abs(ours - its) <= max(2, 0.1 * its), f"{name} {method}: {ours} iterations vs scipy {its}")
    check(len(res["history"]) >= 2 and res["history"][-1] <= rtol * np.linalg.norm(b) * 1.01,
          f"{name} {method}: history ends at {res['history'][-1] if res['history'] else None}")
    if kappa is not None:
        xd = sla.spsolve(a.tocsc(), b)
        err = np.linalg.norm(x - xd) / np.linalg.norm(xd)
        err_s = np.linalg.norm(x - xs) / np.linalg.norm(xd)
        bound = 2.0 * kappa * rtol
        print(f"  {'':<24}      error vs direct {err:.3g}, vs scipy {err_s:.3g} "
              f"(kappa {kappa:.3g}: bound {bound:.3g})")
        check(err <= bound, f"{name} {method}: error {err:.3g} > kappa * rtol bound {bound:.3g}")
        check(err_s <= 2 * bound, f"{name} {method}: differs from scipy by {err_s:.3g}")
    return res


def test_494_bus(client):
    a = scipy.io.mmread(os.path.join(ARGS.matrices, "494_bus.mtx")).tocsr()
    b = np.random.default_rng(494).uniform(-1, 1, a.shape[0])
    kappa = np.linalg.cond(a.toarray())
    compare(client, "494_bus", a, b, 1e-8, "cg", kappa)
    compare(client, "494_bus", a, b, 1e-8, "pcg", kappa)
    compare(client, "494_bus (b = A 1)", a, a @ np.ones(a.shape[0]), 1e-10, "cg", kappa)


def test_dwt_878_shifted(client):
    a = scipy.io.mmread(os.path.join(ARGS.matrices, "dwt_878.mtx")).tocsr()
    a = (a + 4.0 * sp.identity(a.shape[0])).tocsr()
    b = np.random.default_rng(878).uniform(-1, 1, a.shape[0])
    kappa = np.linalg.cond(a.toarray())
    compare(client, "dwt_878 + 4I", a, b, 1e-10, "cg", kappa)
    compare(client, "dwt_878 + 4I", a, b, 1e-10, "pcg", kappa)


def test_laplacian(client):
    a = laplacian_2d(64)
    b = np.random.default_rng(64).uniform(-1, 1, a.shape[0])
    kappa = 4.0 / (4.0 * np.sin(np.pi / (2 * 65)) ** 2)  # lambda_max / lambda_min, about 1.7e3
    compare(client, "laplacian 64x64", a, b, 1e-10, "cg", kappa)
    # Badly scaled: S L S with S = diag(10^u); Jacobi undoes the scaling, SciPy's too.
    s = sp.diags(10.0 ** np.random.default_rng(7).uniform(-1.5, 1.5, a.shape[0]))
    compare(client, "scaled laplacian 64x64", (s @ a @ s).tocsr(), b, 1e-8, "pcg")


def test_several_right_hand_sides(client):
    """Three columns in one request, each against SciPy alone."""
    a = laplacian_2d(40)
    n = a.shape[0]
    rng = np.random.default_rng(3)
    b = np.column_stack([rng.uniform(-1, 1, n), a @ np.ones(n), 1e3 * rng.uniform(-1, 1, n)])
    mid = client.put_csr(a)["id"]
    for method in ("cg", "pcg"):
        x, res = client.solve(mid, b, method=method, rtol=1e-9)
        m = sp.diags(1.0 / a.diagonal()) if method == "pcg" else None
        print(f"  3 right-hand sides {method}: {res['status']} {res['iterations']}")
        check(isinstance(res["status"], list) and len(res["status"]) == 3, "status is a list of 3")
        for j in range(3):
            xs, info, its = scipy_cg(a, b[:, j], 1e-9, m=m)
            rr = relres(a, x[:, j], b[:, j])
            check(res["status"][j] == "converged", f"column {j}: {res['status'][j]}")
            check(rr <= 1e-9 * 1.01, f"column {j}: relres {rr:.3g}")
            check(abs(res["iterations"][j] - its) <= max(2, 0.1 * its),
                  f"column {j}: {res['iterations'][j]} iterations vs scipy {its}")
            check(abs(res["relative_residual"][j] - rr) <= 0.05 * rr + 1e-15,
                  f"column {j}: reported {res['relative_residual'][j]:.3g} vs {rr:.3g}")


def test_float32(client):
    a = laplacian_2d(64)
    b = np.random.default_rng(32).uniform(-1, 1, a.shape[0]).astype(np.float32)
    mid = client.put_csr(a, dtype="float32")["id"]
    for method in ("cg", "pcg"):
        x, res = client.solve(mid, b, dtype="float32", method=method, rtol=1e-5)
        a32 = a.astype(np.float32).astype(np.float64)
        rr = relres(a32, x, b.astype(np.float64))
        print(f"  float32 laplacian {method}: {res['status']} in {res['iterations']} "
              f"(relres {rr:.3g})")
        check(res["status"] == "converged", f"float32 {method}: {res['status']}")
        # The device's own ||b - A x|| carries float32 rounding of A x (eps ||b|| / ||r||).
        check(rr <= 1e-5 * 1.05, f"float32 {method}: relres {rr:.3g}")


if __name__ == "__main__":
    sys.exit(kd_rpc.run_tests(globals()))
