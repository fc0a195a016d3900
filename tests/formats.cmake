# SpMV formats and their selection: every format x dtype against the CPU reference on real and
# generated matrices (kernel), the selection's drop rules, forced formats and heuristic (kernel),
# and forced formats over the wire through a real krylovd (e2e).
kd_add_test(test_formats SOURCES test_formats.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_solver kd_protocol PkgConfig::ZLIB LABELS kernel TIMEOUT 240)
kd_add_test(test_matrix_values SOURCES test_matrix_values.c LIBS kd_solver LABELS kernel
            TIMEOUT 240)
kd_add_test(test_select SOURCES test_select.c LIBS kd_solver LABELS kernel TIMEOUT 240)
kd_add_test(test_e2e_formats SOURCES test_e2e_formats.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS krylov kd_protocol kd_solver PkgConfig::ZLIB LABELS e2e TIMEOUT 300)
add_dependencies(test_e2e_formats krylovd)
