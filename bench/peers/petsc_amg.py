#!/usr/bin/env python3
"""Issue 13's AMG anchors: PETSc's CG with Jacobi, GAMG and hypre BoomerAMG on five SPD matrices
made here with SciPy, on the CPU (this is no GPU peer), under `mpirun -np 2`.

Install (Debian bookworm; a benchmark-only peer, not in deploy/install-deps.sh):
    apt-get install -y python3-petsc4py python3-scipy     # PETSc 3.18, hypre 2.26, Open MPI 4.1
Debian's petsc4py finds PETSc through PETSC_DIR (its /usr/lib/petsc alternative comes with the -dev
package only); this script sets PETSC_DIR=/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real when it
is unset. Use the system python (/usr/bin/python3): the packages live in its dist-packages.

Run (from anywhere; as root Open MPI also needs OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, which the script sets for the mpirun it starts):
    /usr/bin/python3 bench/peers/petsc_amg.py [--np 2] [--cache DIR] [--only NAME,...]
                                             [--pcs jacobi,gamg,hypre] [--mtx] [--json FILE]
It writes each matrix once to DIR (default build/amg-matrices, git-ignored) as NAME.npz (CSR
arrays: indptr, indices, data, shape, block size; coordinates for the elasticity), then starts
`mpirun -np 2 /usr/bin/python3 petsc_amg.py solve ...`, which reads them, distributes rows in
blocks (block-size aligned) and solves A x = b, b = ones, x0 = 0, with KSPCG to a relative
residual of 1e-8 in the unpreconditioned 2-norm (KSP_NORM_UNPRECONDITIONED, rtol 1e-8, atol 0;
the true relative residual ||b - A x|| / ||b|| is recomputed after the solve and printed), at most
20000 iterations, for each preconditioner:
    jacobi     PCJACOBI
    gamg       PCGAMG with PETSc's defaults (block size set on the matrix, so aggregation is nodal)
    gamg_rbm   elasticity only: GAMG with the six rigid-body modes as the near null space
               (MatNullSpaceCreateRigidBody on the nodes' coordinates)
    gamg_t02   anisotropic only: GAMG with -pc_gamg_threshold 0.02
    hypre      PCHYPRE BoomerAMG, hypre's defaults
Printed per solve: iterations, setup seconds (KSPSetUp: the preconditioner's construction), solve
seconds (KSPSolve), the true relative residual; one JSON line each with --json FILE.
--mtx also writes NAME.mtx (Matrix Market, symmetric, lower triangle; krylov-bench reads it as a
MATRIX argument: the same CSR to the bit, checked for kron40) and, for the elasticity,
NAME.coords (x y z of each node, in the rows' order), so krylovd's benchmark multiplies and solves
the same matrices. lap3d100 and lap2d1024 are krylov-bench's lap3d:100 and lap2d:1024 to the bit.

The matrices (NAME: what; all SPD; rows in the order given):
  lap3d100   7-point Laplacian on the 100^3 interior points of a grid with Dirichlet boundary
             (6 on the diagonal, -1 off it, boundary eliminated), row = (z*100 + y)*100 + x:
             exactly krylov-bench's lap3d:100. 1,000,000 rows.
  lap2d1024  5-point Laplacian, same construction, row = y*1024 + x: krylov-bench's lap2d:1024.
             1,048,576 rows.
  elast40    linear elasticity, trilinear (Q1) hexahedra, 2x2x2 Gauss points: a box of 40 x 39 x
             39 cubic elements of side h = 1/40 (the domain [0,1] x [0,0.975] x [0,0.975]), E = 1,
             nu = 0.3 (isotropic, Lame lambda = E nu / ((1+nu)(1-2nu)), mu = E / (2(1+nu))); the
             face x = 0 is clamped (its 40 x 40 nodes and their dofs eliminated), every other face
             free; the 40^3 other nodes keep 3 dofs each, interlaced (row = 3*node + component,
             node = (k*40 + j)*40 + (i-1) for node (i, j, k), i = 1..40): 192,000 rows, block
             size 3.
  kron40     kron(L, B) + 1e-4 I: L the 7-point Laplacian of 40^3 as lap3d100 (krylov-bench's
             lap3d:40), B = [[3, 1, 0.5], [1, 2, 0.5], [0.5, 0.5, 1]] (SPD, eigenvalues about
             0.79, 1.42, 3.79); row = 3*node + component: 192,000 rows, block size 3.
  aniso1024  -u_xx - eps u_yy, eps = 1e-3, 5-point on the 1024^2 interior points with Dirichlet
             boundary: 2 + 2 eps on the diagonal, -1 to the x neighbours (row +- 1), -eps to the
             y neighbours (row +- 1024); row = y*1024 + x. 1,048,576 rows.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

NAMES = ["elast40", "kron40", "lap3d100", "lap2d1024", "aniso1024"]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PETSC_DIR = "/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real"


# ---- the matrices (SciPy) --------------------------------------------------------------------

def lap1d(n, diag=2.0, off=-1.0):
    import scipy.sparse as sp
    return sp.diags([np.full(n - 1, off), np.full(n, diag), np.full(n - 1, off)], [-1, 0, 1])


def laplacian(n, dim, eps=1.0):
    """Dirichlet 5-/7-point Laplacian on n^dim interior points, x fastest; eps scales y (2-D)."""
    import scipy.sparse as sp
    eye = sp.identity(n, format="csr")
    t = lap1d(n)
    if dim == 2:  # kron(I_y, T_x) + eps kron(T_y, I_x): row = y*n + x
        return (sp.kron(eye, t) + eps * sp.kron(t, eye)).tocsr()
    return (sp.kron(sp.kron(eye, eye), t) + sp.kron(sp.kron(eye, t), eye)
            + sp.kron(sp.kron(t, eye), eye)).tocsr()


def hex8_stiffness(h, E, nu):
    """24 x 24 stiffness of a cube of side h, trilinear, 2x2x2 Gauss; local node a + 2b + 4c at
    (a, b, c) h, dofs 3*node + component."""
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    D = np.zeros((6, 6))
    D[:3, :3] = lam
    D[np.arange(3), np.arange(3)] += 2 * mu
    D[np.arange(3, 6), np.arange(3, 6)] = mu
    corners = np.array([(a, b, c) for c in (0, 1) for b in (0, 1) for a in (0, 1)], float)
    g = [0.5 - 0.5 / np.sqrt(3), 0.5 + 0.5 / np.sqrt(3)]
    K = np.zeros((24, 24))
    for gx in g:
        for gy in g:
            for gz in g:
                p = np.array([gx, gy, gz])
                dN = np.zeros((8, 3))  # dN/dx = dN/dxi / h
                for n, cn in enumerate(corners):
                    f = np.where(cn == 1, p, 1 - p)   # each factor of N_n
                    df = np.where(cn == 1, 1.0, -1.0)
                    dN[n] = [df[0] * f[1] * f[2], f[0] * df[1] * f[2], f[0] * f[1] * df[2]]
                dN /= h
                B = np.zeros((6, 24))
                for n in range(8):
                    x, y, z = dN[n]
                    B[0, 3 * n], B[1, 3 * n + 1], B[2, 3 * n + 2] = x, y, z
                    B[3, 3 * n + 1], B[3, 3 * n + 2] = z, y   # yz
                    B[4, 3 * n], B[4, 3 * n + 2] = z, x       # xz
                    B[5, 3 * n], B[5, 3 * n + 1] = y, x       # xy
                K += B.T @ D @ B * (h ** 3 / 8.0)
    return K


def elasticity(n=40, E=1.0, nu=0.3):
    """Q1 elasticity: n+1 node planes in x (x = 0 clamped), n in y and z; returns (A, coords)."""
    import scipy.sparse as sp
    h = 1.0 / n
    Ke = hex8_stiffness(h, E, nu)
    ex, ey, ez = n, n - 1, n - 1                      # elements per axis
    nfree = n * n * n

    def node(i, j, k):                                # -1 on the clamped plane i = 0
        return np.where(i == 0, -1, (k * n + j) * n + (i - 1))

    I, J, K = np.meshgrid(np.arange(ex), np.arange(ey), np.arange(ez), indexing="ij")
    I, J, K = I.ravel(), J.ravel(), K.ravel()
    local = [(a, b, c) for c in (0, 1) for b in (0, 1) for a in (0, 1)]
    nodes = np.stack([node(I + a, J + b, K + c) for a, b, c in local], axis=1)   # elems x 8
    dofs = (3 * nodes[:, :, None] + np.arange(3)[None, None, :]).reshape(-1, 24)
    dofs[np.repeat(nodes, 3, axis=1) < 0] = -1
    rows = np.repeat(dofs, 24, axis=1).ravel()
    cols = np.tile(dofs, (1, 24)).ravel()
    vals = np.tile(Ke.ravel(), len(dofs))
    keep = (rows >= 0) & (cols >= 0)
    A = sp.csr_matrix((vals[keep], (rows[keep], cols[keep])), shape=(3 * nfree, 3 * nfree))
    A.sum_duplicates()
    i = np.arange(nfree) % n + 1
    j = (np.arange(nfree) // n) % n
    k = np.arange(nfree) // (n * n)
    coords = np.stack([i * h, j * h, k * h], axis=1).ravel()
    return A, coords


KRON_B = np.array([[3.0, 1.0, 0.5], [1.0, 2.0, 0.5], [0.5, 0.5, 1.0]])


def build(name):
    """(A as CSR, block size, coordinates or None)."""
    import scipy.sparse as sp
    if name == "lap3d100":
        return laplacian(100, 3), 1, None
    if name == "lap2d1024":
        return laplacian(1024, 2), 1, None
    if name == "aniso1024":
        return laplacian(1024, 2, eps=1e-3), 1, None
    if name == "kron40":
        A = sp.kron(laplacian(40, 3), sp.csr_matrix(KRON_B)) + 1e-4 * sp.identity(3 * 40 ** 3)
        return A.tocsr(), 3, None
    if name == "elast40":
        A, coords = elasticity(40)
        return A, 3, coords
    raise SystemExit(f"unknown matrix {name}")


def write_mtx(path, A):
    """Symmetric Matrix Market, lower triangle, 17 significant digits."""
    import scipy.sparse as sp
    L = sp.tril(A, format="coo")
    with open(path, "w") as f:
        f.write("%%MatrixMarket matrix coordinate real symmetric\n")
        f.write(f"% made by bench/peers/petsc_amg.py\n{A.shape[0]} {A.shape[1]} {L.nnz}\n")
        np.savetxt(f, np.column_stack([L.row + 1, L.col + 1, L.data]), fmt="%d %d %.17g")


def generate(cache, names, mtx):
    os.makedirs(cache, exist_ok=True)
    for name in names:
        path = os.path.join(cache, name + ".npz")
        if not os.path.exists(path):
            t = time.perf_counter()
            A, bs, coords = build(name)
            A.sort_indices()
            np.savez(path, indptr=A.indptr, indices=A.indices, data=A.data,
                     shape=np.array(A.shape), bs=np.array(bs),
                     coords=coords if coords is not None else np.zeros(0))
            print(f"{name}: {A.shape[0]} rows, nnz {A.nnz}, block size {bs} -> {path} "
                  f"({time.perf_counter() - t:.1f} s)", flush=True)
        if mtx and not os.path.exists(os.path.join(cache, name + ".mtx")):
            import scipy.sparse as sp
            z = np.load(path)
            A = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
            write_mtx(os.path.join(cache, name + ".mtx"), A)
            if z["coords"].size:  # the nodes' coordinates, one node a line, in the rows' order
                np.savetxt(os.path.join(cache, name + ".coords"), z["coords"].reshape(-1, 3),
                           fmt="%.17g")


# ---- the solves (petsc4py, under mpirun) -----------------------------------------------------

def solve(args):
    try:
        import petsc4py
    except ImportError:  # the .pth that reads PETSC_DIR ran before it was set
        sys.path.append(os.path.join(os.environ["PETSC_DIR"], "lib", "python3", "dist-packages"))
        import petsc4py
    petsc4py.init(sys.argv[:1])
    from petsc4py import PETSc
    comm = PETSc.COMM_WORLD
    rank = comm.getRank()
    out = open(args.json, "a") if args.json and rank == 0 else None

    def say(s):
        if rank == 0:
            print(s, flush=True)

    say(f"PETSc {'.'.join(map(str, PETSc.Sys.getVersion()))}, {comm.getSize()} MPI ranks; "
        f"CG, rtol 1e-8 (unpreconditioned norm), b = ones")
    say(f"{'matrix':<10} {'rows':>9} {'nnz':>10} {'pc':<9} {'its':>6} {'setup s':>8} "
        f"{'solve s':>8} {'true rel res':>12}")
    for name in args.only:
        z = np.load(os.path.join(args.cache, name + ".npz"))
        N, bs = int(z["shape"][0]), int(z["bs"])
        ip, ix, va = z["indptr"], z["indices"], z["data"]
        v = PETSc.Vec().createMPI(N, bsize=bs, comm=comm)
        r0, r1 = v.getOwnershipRange()
        lip = (ip[r0:r1 + 1] - ip[r0]).astype(PETSc.IntType)
        A = PETSc.Mat().createAIJ(size=((r1 - r0, N), (r1 - r0, N)), bsize=bs,
                                  csr=(lip, ix[ip[r0]:ip[r1]].astype(PETSc.IntType),
                                       va[ip[r0]:ip[r1]]), comm=comm)
        A.assemble()
        nnz = int(ip[-1])
        pcs = []
        for pc in args.pcs:
            pcs.append(pc)
            if pc == "gamg" and name == "elast40":
                pcs.append("gamg_rbm")
            if pc == "gamg" and name == "aniso1024":
                pcs.append("gamg_t02")
        for pc in pcs:
            opts = PETSc.Options()
            prefix = f"{name}_{pc}_"
            ksp = PETSc.KSP().create(comm=comm)
            ksp.setOptionsPrefix(prefix)
            ksp.setType("cg")
            ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
            ksp.setTolerances(rtol=1e-8, atol=0.0, max_it=args.maxit)
            ksp.setInitialGuessNonzero(False)
            p = ksp.getPC()
            M = A
            if pc == "jacobi":
                p.setType("jacobi")
            elif pc.startswith("gamg"):
                p.setType("gamg")
                if pc == "gamg_t02":
                    opts[prefix + "pc_gamg_threshold"] = "0.02"
                if pc == "gamg_rbm":
                    M = A.duplicate(copy=True)
                    c = PETSc.Vec().createMPI((r1 - r0, N), bsize=bs, comm=comm)
                    c.setArray(z["coords"][r0:r1])
                    M.setNearNullSpace(PETSc.NullSpace().createRigidBody(c))
            elif pc == "hypre":
                p.setType("hypre")
                p.setHYPREType("boomeramg")
            else:
                raise SystemExit(f"unknown pc {pc}")
            ksp.setOperators(M)
            ksp.setFromOptions()
            b = M.createVecLeft()
            b.set(1.0)
            x = M.createVecRight()
            x.set(0.0)
            comm.barrier()
            t0 = time.perf_counter()
            ksp.setUp()
            comm.barrier()
            t1 = time.perf_counter()
            ksp.solve(b, x)
            comm.barrier()
            t2 = time.perf_counter()
            r = b.duplicate()
            M.mult(x, r)
            r.aypx(-1.0, b)
            rel = r.norm() / b.norm()
            its = ksp.getIterationNumber()
            reason = ksp.getConvergedReason()
            say(f"{name:<10} {N:>9} {nnz:>10} {pc:<9} {its:>6} {t1 - t0:>8.2f} {t2 - t1:>8.2f} "
                f"{rel:>12.2e}" + ("" if reason > 0 else f"  (not converged: reason {reason})"))
            if out:
                out.write(json.dumps({
                    "matrix": name, "rows": N, "nnz": nnz, "block_size": bs, "pc": pc,
                    "iterations": its, "setup_s": t1 - t0, "solve_s": t2 - t1,
                    "true_rel_residual": rel, "converged_reason": reason,
                    "ranks": comm.getSize(),
                    "petsc": ".".join(map(str, PETSc.Sys.getVersion()))}) + "\n")
                out.flush()
            for o in ("pc_gamg_threshold",):
                opts.delValue(prefix + o)
            ksp.destroy()
            if M is not A:
                M.destroy()
        A.destroy()
    if out:
        out.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", nargs="?", default="run", choices=["run", "generate", "solve"])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--cache", default=os.path.join(ROOT, "build", "amg-matrices"))
    ap.add_argument("--only", default=",".join(NAMES))
    ap.add_argument("--pcs", default="jacobi,gamg,hypre")
    ap.add_argument("--maxit", type=int, default=20000)
    ap.add_argument("--mtx", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.only = [n for n in a.only.split(",") if n]
    a.pcs = [p for p in a.pcs.split(",") if p]
    os.environ.setdefault("PETSC_DIR", PETSC_DIR)
    if a.mode == "solve":
        return solve(a)
    generate(a.cache, a.only, a.mtx)
    if a.mode == "generate":
        return 0
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1")
    cmd = ["mpirun", "-np", str(a.np), sys.executable, os.path.abspath(__file__), "solve",
           "--cache", a.cache, "--only", ",".join(a.only), "--pcs", ",".join(a.pcs),
           "--maxit", str(a.maxit)] + (["--json", a.json] if a.json else [])
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
