# Matrices spread over ranks (dist/). The partition and the halo plan on the host, without MPI
# (unit: it also runs under ASan); the device blocks, SpMV and solves under a real mpirun with
# 1, 2 and 3 ranks (label mpi, which `make test-asan` leaves out: it runs -L 'unit|e2e').
kd_add_test(test_dist_plan SOURCES test_dist_plan.c LIBS kd_dist_plan LABELS unit TIMEOUT 120)
