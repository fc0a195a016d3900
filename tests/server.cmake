# Server internals without a daemon: the state directory's files, the configuration, the auth
# file and the tenants' view of a matrix.
kd_add_test(test_state SOURCES test_state.c LIBS kd_server LABELS unit)
kd_add_test(test_config SOURCES test_config.c LIBS kd_server LABELS unit)
kd_add_test(test_auth SOURCES test_auth.c LIBS kd_server LABELS unit)
# What a reply shows of a matrix to an admin and to a tenant (server/store/store.c, kd_meta_view).
kd_add_test(test_meta_view SOURCES test_meta_view.c LIBS kd_server LABELS unit)
# server/net/tls.c against an OpenSSL client over memory BIOs (issue 15).
kd_add_test(test_tls SOURCES test_tls.c LIBS kd_server LABELS unit)

# krylovd_faults: the daemon with the state layer's fault hook compiled in (server/store/state_io.h,
# KD_TEST_HOOKS; KD_TEST_FAULT picks the fault). A test build only: never installed, and krylovd
# itself has no hook. Its state_io.o comes before libkd_server.a, so the archive's is not linked.
add_executable(krylovd_faults ${PROJECT_SOURCE_DIR}/server/main.c
                              ${PROJECT_SOURCE_DIR}/server/store/state_io.c)
target_compile_definitions(krylovd_faults PRIVATE KD_TEST_HOOKS=1)
target_link_libraries(krylovd_faults PRIVATE kd_server)
# A full state disk (issue 21): STORAGE_FULL on a small tmpfs (when one can be mounted) and on the
# hook's pretend file system; crash sweep: the daemon killed at every write, fsync, rename, unlink
# and mkdir of a put / pin / drop sequence, then restarted on the same directory.
kd_add_test(test_e2e_storage SOURCES test_e2e_storage.c LIBS krylov kd_protocol kd_bench LABELS e2e)
add_dependencies(test_e2e_storage krylovd krylovd_faults)
# About 130 kills, each a daemon start and a restart: about a minute on PoCL, more under ASan.
kd_add_test(test_e2e_crash SOURCES test_e2e_crash.c LIBS krylov kd_protocol kd_bench LABELS e2e
            TIMEOUT 900)
add_dependencies(test_e2e_crash krylovd_faults)
