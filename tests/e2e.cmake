# End-to-end tests: a real krylovd on loopback (started by the test, port 0), the C client.
kd_add_test(test_e2e_basic SOURCES test_e2e_basic.c LIBS krylov kd_protocol LABELS e2e)
add_dependencies(test_e2e_basic krylovd)
kd_add_test(test_e2e_wire SOURCES test_e2e_wire.c LIBS krylov kd_protocol LABELS e2e)
add_dependencies(test_e2e_wire krylovd)
# The service under load, faults and hostile input (issue #5): persistence across a crash, the
# device-memory budget and eviction, cancellation, timeouts and shutdown, hostile clients, load.
foreach(t test_e2e_restart test_e2e_cache test_e2e_jobs test_e2e_hostile)
  kd_add_test(${t} SOURCES ${t}.c LIBS krylov kd_protocol kd_bench LABELS e2e)
  add_dependencies(${t} krylovd)
endforeach()
kd_add_test(test_e2e_load SOURCES test_e2e_load.c LIBS kd_loadgen kd_bench LABELS e2e)
add_dependencies(test_e2e_load krylovd)
