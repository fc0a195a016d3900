# Server internals without a daemon: the state directory's files, the configuration and the
# auth file.
kd_add_test(test_state SOURCES test_state.c LIBS kd_server LABELS unit)
kd_add_test(test_config SOURCES test_config.c LIBS kd_server LABELS unit)
kd_add_test(test_auth SOURCES test_auth.c LIBS kd_server LABELS unit)
# server/tls.c against an OpenSSL client over memory BIOs (issue 15).
kd_add_test(test_tls SOURCES test_tls.c LIBS kd_server LABELS unit)
