# Solver kernel tests: real OpenCL on the default device (PoCL on a machine without a GPU), or on
# the device named by env KD_TEST_DEVICE ("auto", "gpu", "cpu" or an index).
foreach(t test_ocl test_vector test_pool test_spmv test_spmm test_blas test_krylov test_solve)
  kd_add_test(${t} SOURCES ${t}.c LIBS kd_solver LABELS kernel TIMEOUT 240)
endforeach()
# The solver's statuses, iteration counts and residual histories against the record in
# tests/data/solve_histories.txt (see the test's header).
kd_add_test(test_solve_history SOURCES test_solve_history.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 300)
# The method and preconditioner tables, and cg1 (the method added through them).
kd_add_test(test_methods SOURCES test_methods.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 300)
# Symmetry at upload (the scan against a reference), reordered matrices, the solve's refusal.
kd_add_test(test_symmetry SOURCES test_symmetry.c LIBS kd_solver LABELS kernel TIMEOUT 300)
# bicgstab and minres: convergence by the CPU's measure on nonsymmetric and symmetric indefinite
# matrices, columns alone, schedules, x0, singular systems, breakdowns.
kd_add_test(test_bicgstab_minres SOURCES test_bicgstab_minres.c
            ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol kd_bench PkgConfig::ZLIB LABELS kernel TIMEOUT 400)
# cg / pcg's small-system path (many iterations per launch) against the general path.
kd_add_test(test_cg_small SOURCES test_cg_small.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 300)
# Restarted GMRES(m): generated and real nonsymmetric matrices, against a CPU GMRES, edges.
kd_add_test(test_gmres SOURCES test_gmres.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 600)
# Smoothed-aggregation AMG: the host pieces, AMG-PCG against Jacobi-PCG, symmetry, errors.
kd_add_test(test_amg SOURCES test_amg.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 300)
# Sparse times sparse (kd_spgemm) against a sequential CPU reference, bit for bit, on generated
# and real matrices, with its refusals (sizes, limits, mismatches).
kd_add_test(test_spgemm SOURCES test_spgemm.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 240)
# The incomplete factorisations ilu0 and ic0: host factors against a dense reference, the device
# triangular solves against the host's, CG with ic0 against CG with jacobi, refusals.
kd_add_test(test_ilu SOURCES test_ilu.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 300)
# ilu0's row matching for zero-diagonal matrices: the matching against brute force and its
# refusals, the apply with a matching against the host, gmres/bicgstab + ilu0 on circuit matrices.
kd_add_test(test_ilu_match SOURCES test_ilu_match.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 300)
# Block Jacobi and Chebyshev polynomial preconditioning: apply against CPU references, CG with
# each against none and Jacobi on elasticity, a Laplacian and real matrices, errors.
kd_add_test(test_preconds SOURCES test_preconds.c LIBS kd_solver kd_bench LABELS kernel
            TIMEOUT 300)
# Compiled programs on disk: keys, the round trip through a fresh device handle, damaged files
# rejected and rebuilt, pruning, and the warm-up's list against the launch paths' options.
kd_add_test(test_program_cache SOURCES test_program_cache.c LIBS kd_solver LABELS kernel
            TIMEOUT 240)
# Batched matrices and solves: batched SpMV against the CPU, batched cg / bicgstab against the
# single-system path per system, one bad system among good ones, the global variant, limits.
kd_add_test(test_batch SOURCES test_batch.c
            LIBS kd_solver kd_protocol kd_bench PkgConfig::ZLIB LABELS kernel TIMEOUT 400)
# New values on a resident pattern (kd_precond_refresh): refreshed against fresh setups, the old
# setup untouched, PCG iterations, pattern refusals, fallbacks to a fresh setup.
kd_add_test(test_precond_refresh SOURCES test_precond_refresh.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 300)
# Batches of systems of their own patterns (solve.batch's solver half): their SpMV against the
# CPU, kd_batch_solve_items on five patterns and sizes against kd_solve of each item alone.
kd_add_test(test_batch_items SOURCES test_batch_items.c
            LIBS kd_solver kd_protocol kd_bench PkgConfig::ZLIB LABELS kernel TIMEOUT 600)
