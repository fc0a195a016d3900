# Solver kernel tests: real OpenCL on the default device (PoCL on a machine without a GPU), or on
# the device named by env KD_TEST_DEVICE ("auto", "gpu", "cpu" or an index).
foreach(t test_ocl test_vector test_spmv test_blas test_krylov test_solve)
  kd_add_test(${t} SOURCES ${t}.c LIBS kd_solver LABELS kernel TIMEOUT 240)
endforeach()
