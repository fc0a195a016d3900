# docs/examples/scipy_session.py: the code of docs/examples/scipy_session.md, block by block.
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov

n = 100
T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
A = (sp.kron(sp.eye(n), T) + sp.kron(T, sp.eye(n))).tocsr()
rng = np.random.default_rng()
b = rng.standard_normal(A.shape[0])
print(f"A: {A.shape[0]} x {A.shape[1]}, {A.nnz} nonzeros")

kd = krylov.Client()
print("server:", kd.status().device["name"])
info = kd.put(A, name="poisson-100")
print(f"uploaded {info.id}: {info.shape}, {info.nnz} nonzeros, format {info.format}")
assert kd.put(A).id == info.id

x = rng.standard_normal(A.shape[1])
y = kd.spmv(info, x)
print("max |spmv - A @ x| =", np.max(np.abs(y - A @ x)))
assert np.allclose(y, A @ x, rtol=1e-12, atol=1e-12)
z = kd.spmv(info, x, alpha=2.0, beta=-1.0, y=y)
assert np.allclose(z, A @ x, rtol=1e-12, atol=1e-12)

res = kd.solve(info, b, rtol=1e-10, history=True)
print(res)
assert res.converged
print("||b - A x|| / ||b|| here:", np.linalg.norm(b - A @ res.x) / np.linalg.norm(b))
x_direct = spla.spsolve(A.tocsc(), b)
print("relative difference from spsolve:",
      np.linalg.norm(res.x - x_direct) / np.linalg.norm(x_direct))
assert np.linalg.norm(res.x - x_direct) <= 1e-6 * np.linalg.norm(x_direct)
print(f"{len(res.history)} residual checks, from {res.history[0]:.2e} to {res.history[-1]:.2e}")

B = rng.standard_normal((A.shape[0], 4))
block = kd.solve(info, B, rtol=1e-8)
print(block.status, list(block.iterations))
for j in range(B.shape[1]):
    assert np.linalg.norm(B[:, j] - A @ block.x[:, j]) <= 1e-8 * np.linalg.norm(B[:, j]) * 1.01

warm = kd.solve(info, b + 1e-6 * rng.standard_normal(b.size), x0=res.x, rtol=1e-10)
print(f"warm start: {warm.iterations} iterations instead of {res.iterations}")
assert warm.iterations < res.iterations

def stop_after_1000(p):
    print(f"  iteration {p.iteration:6d}  ||r|| = {p.residual:.3e}")
    return p.iteration >= 1000

try:
    kd.solve(info, b, method="sd", rtol=1e-12, maxiter=10**7, callback=stop_after_1000)
    print("finished before we stopped it")
except krylov.Cancelled as e:
    print("stopped:", e.message)

try:
    kd.spmv(info, np.ones(5))
except krylov.BadRequest as e:
    print(e.code, "-", e.message)
try:
    kd.info("0" * 32)
except krylov.NotFound as e:
    print(e.code, "-", e.message)

from krylov.scipy import ResidentOperator

op = ResidentOperator(kd, info, symmetric=True)
x_cg, status = spla.cg(op, b, maxiter=2000)
print("scipy cg through krylovd:", status,
      np.linalg.norm(b - A @ x_cg) / np.linalg.norm(b))
assert status == 0
largest = spla.eigsh(op, k=1, which="LA", return_eigenvectors=False)[0]
print(f"largest eigenvalue {largest:.6f} (8 sin^2(pi n / (2 (n + 1))) = "
      f"{8 * np.sin(np.pi * n / (2 * (n + 1))) ** 2:.6f})")
assert abs(largest - 8 * np.sin(np.pi * n / (2 * (n + 1))) ** 2) < 1e-6

kd.drop(info)
assert info.id not in {m.id for m in kd.list()}
kd.close()
print("done")
