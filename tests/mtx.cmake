# Matrix Market text (protocol/mtx.c) and files (client/mtx_file.c).
kd_add_test(test_mtx SOURCES test_mtx.c LIBS kd_protocol LABELS unit)
kd_add_test(test_mtx_file SOURCES test_mtx_file.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
            LIBS kd_protocol PkgConfig::ZLIB LABELS unit)
