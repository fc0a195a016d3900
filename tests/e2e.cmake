# End-to-end tests: a real krylovd on loopback (started by the test, port 0), the C client.
kd_add_test(test_e2e_basic SOURCES test_e2e_basic.c LIBS krylov kd_protocol LABELS e2e)
add_dependencies(test_e2e_basic krylovd)
kd_add_test(test_e2e_wire SOURCES test_e2e_wire.c LIBS krylov kd_protocol LABELS e2e)
add_dependencies(test_e2e_wire krylovd)
# Python end-to-end tests of solve (tests/python): a real krylovd driven over a socket with the
# `msgpack` module alone, judged against NumPy and SciPy (Debian's python3-numpy, -scipy,
# -msgpack under /usr/bin/python3). Exit 77 (skipped) where those are missing.
find_program(KD_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KD_PYTHON3)
  foreach(t test_scipy_validation test_solve_server)
    add_test(NAME ${t} COMMAND ${KD_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/python/${t}.py
                               --bin-dir ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} --matrices ${KD_TEST_MATRICES})
    set_tests_properties(${t} PROPERTIES LABELS e2e TIMEOUT 600 SKIP_RETURN_CODE 77)
  endforeach()
endif()
