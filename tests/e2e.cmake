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
# Waiting spmv requests served as one group, same-matrix ones as one SpMM launch, and waiting
# solves on one matrix as one multi-column solve (issue 16, item 5).
kd_add_test(test_e2e_batching SOURCES test_e2e_batching.c LIBS krylov kd_protocol kd_bench
            LABELS e2e)
add_dependencies(test_e2e_batching krylovd)
kd_add_test(test_e2e_load SOURCES test_e2e_load.c LIBS kd_loadgen kd_bench LABELS e2e)
add_dependencies(test_e2e_load krylovd)
# Solves through the server judged against SciPy (tests/python; a real krylovd driven over a
# socket with the `msgpack` module alone), run with Debian's python3 (KD_PYTHON, python.cmake).
set(KD_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with numpy, scipy and msgpack for the tests")
foreach(t test_scipy_validation test_solve_server)
  add_test(NAME ${t} COMMAND ${KD_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/${t}.py
                             --bin-dir ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} --matrices ${KD_TEST_MATRICES})
  set_tests_properties(${t} PROPERTIES LABELS "e2e;python" TIMEOUT 600)
endforeach()
# Reordering at upload (issue 12): reorder on matrix.put, matrix.info, spmv, solve, a restart.
kd_add_test(test_e2e_reorder SOURCES test_e2e_reorder.c LIBS krylov kd_protocol kd_solver LABELS e2e)
add_dependencies(test_e2e_reorder krylovd)
# matrix.multiply (issue 13): products of real matrices checked through spmv, every refusal, a
# restart, a server without --state-dir.
kd_add_test(test_e2e_multiply SOURCES test_e2e_multiply.c LIBS krylov kd_protocol LABELS e2e)
add_dependencies(test_e2e_multiply krylovd)
# preconditioner "amg" (issue 13): AMG-PCG against Jacobi-PCG through the server, options and
# refusals, the hierarchy kept with the matrix and rebuilt after a restart or without a state dir.
kd_add_test(test_e2e_amg SOURCES test_e2e_amg.c LIBS krylov kd_protocol LABELS e2e)
add_dependencies(test_e2e_amg krylovd)
# General systems (symmetric flag, the symmetric-only methods' refusal, method auto, restart),
# real matrices, a restart.
kd_add_test(test_e2e_general SOURCES test_e2e_general.c LIBS krylov kd_protocol LABELS e2e)
add_dependencies(test_e2e_general krylovd)
# TLS (issue 15): libkrylov against krylovd with --tls-cert / --tls-ca, certificates made by
# openssl per run.
kd_add_test(test_e2e_tls SOURCES test_e2e_tls.c LIBS krylov kd_protocol LABELS e2e)
add_dependencies(test_e2e_tls krylovd)
# Device faults (issue 21): the k-th allocation, launch, read-back or upload of a put, an spmv and
# a solve fails (solver/runtime/ocl_fault.h) for every k; a clean error, no device bytes lost, the next
# request right. Needs the hook compiled in.
if(KD_TEST_HOOKS)
  kd_add_test(test_e2e_devfault SOURCES test_e2e_devfault.c LIBS kd_server krylov LABELS e2e
              TIMEOUT 900)
endif()
# issue 22's service benchmarks (krylov-bench heat and putlike, bench/bench_heat.c and
# bench/bench_putlike.c) run small against a daemon they start: their answers' checks must hold,
# and must fail on a perturbed loop.
add_test(NAME test_e2e_heat COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_e2e_heat.sh
         ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
set_tests_properties(test_e2e_heat PROPERTIES LABELS "e2e" TIMEOUT 300)
