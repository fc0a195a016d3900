kd_add_test(test_csr SOURCES test_csr.c LIBS kd_common LABELS unit)
kd_add_test(test_reorder SOURCES test_reorder.c LIBS kd_solver LABELS unit)
