kd_add_test(test_csr SOURCES test_csr.c LIBS kd_common LABELS unit)
