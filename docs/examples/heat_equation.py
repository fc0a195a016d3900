"""A transient heat equation through krylovd: backward Euler, u_t = Laplacian(u) on the unit
square with u = 0 on the boundary, a time step that changes every step, so the matrix
I + dt L has new values every step on one sparsity pattern.

Each step sends only the new values (put(..., like=...): 8 bytes a nonzero), solves with a
multigrid preconditioner whose setup is refreshed from the previous step's (or reused as it is
when the step barely changed: reuse_preconditioner), and drops the previous step's matrix.
The result is checked against SciPy's direct solve of the same steps.

    KRYLOV_SERVER=127.0.0.1:7373 python3 heat_equation.py [N] [STEPS]
"""

import sys

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov

n = int(sys.argv[1]) if len(sys.argv) > 1 else 64          # grid points a side
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
h = 1.0 / (n + 1)
t1 = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n)) / h**2
L = sp.csr_matrix(sp.kron(sp.identity(n), t1) + sp.kron(t1, sp.identity(n)))


def step_matrix(dt):
    a = sp.csr_matrix(sp.identity(n * n) + dt * L)
    a.sum_duplicates()  # canonical: what put(like=) sends the values of
    return a


xs = np.linspace(h, 1.0 - h, n)
u0 = np.outer(np.sin(np.pi * xs), np.sin(2 * np.pi * xs)).reshape(-1)  # an eigenmode of L
u, u_ref = u0.copy(), u0.copy()
t = 0.0
with krylov.Client() as kd:
    dt = 1e-4
    A = kd.put(step_matrix(dt), name="heat step 0")
    previous = None
    for k in range(steps):
        # a step that changes (an adaptive integrator would choose it): 1e-4 ... 2e-4
        new_dt = 1e-4 * (1.0 + 0.1 * (k % 10))
        if k > 0:
            previous = A
            A = kd.put(step_matrix(new_dt), like=previous, name=f"heat step {k}")
        dt = new_dt
        # within 5% of the step before, the previous step's preconditioner is good enough
        res = kd.solve(A, u, preconditioner="amg", rtol=1e-10, x0=u,
                       reuse_preconditioner=k % 2 == 1)
        assert res.status == "converged", res
        if previous is not None:  # its setup served this step: now it can go
            kd.call("matrix.drop", {"id": previous.id})
        u = res.x
        u_ref = spla.spsolve(sp.csc_matrix(step_matrix(dt)), u_ref)
        t += dt
        print(f"step {k}: dt {dt:.2e}, {res.iterations} iterations, preconditioner "
              f"{res.preconditioner_setup or 'built'}, |u - u_scipy| {np.abs(u - u_ref).max():.1e}")
    kd.call("matrix.drop", {"id": A.id})
# the mode decays as exp(-lambda t) with lambda the discrete eigenvalue; backward Euler a bit less
lam = (4 / h**2) * (np.sin(np.pi * h / 2) ** 2 + np.sin(2 * np.pi * h / 2) ** 2)
print(f"t = {t:.4f}: max u {np.abs(u).max():.4f}, exact mode exp(-lambda t) "
      f"{np.exp(-lam * t):.4f}, difference from SciPy's steps {np.abs(u - u_ref).max():.1e}")
assert np.abs(u - u_ref).max() < 1e-7
print("done")
