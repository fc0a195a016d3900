# The Python client (client/python), the krylov CLI and the examples in docs/, tested end to end
# from Python: each unittest module in tests/python starts its own krylovd on loopback (port 0).
# They run with Debian's interpreter, which has numpy, scipy and msgpack (deploy/install-deps.sh);
# `python3` on PATH may be another one without them. PYTHONPATH points at the package's source,
# so nothing needs installing (test_py_package checks that it does install).
set(KD_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with numpy, scipy and msgpack for the tests")

if(NOT EXISTS ${KD_PYTHON})
  message(FATAL_ERROR "${KD_PYTHON} not found: run deploy/install-deps.sh (or `make test`, which "
                      "does), or configure with -DKD_BUILD_TESTS=OFF")
endif()

# What the tests run: `cmake --build build --target kd_python_test_deps` builds just that.
add_custom_target(kd_python_test_deps DEPENDS krylovd krylov-cli example_c_client)

set(kd_bin ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
foreach(module test_py_client test_py_scipy test_py_multiply test_py_amg test_py_general test_py_spmm test_py_reput test_py_gmres
               test_py_ilu test_py_package test_cli test_examples test_ops test_py_bicgstab_minres
               test_py_preconds test_py_ilu_match test_py_auth test_py_programs
               test_py_tls test_py_tenants test_py_batch test_py_like test_py_climem
               test_py_solve_many test_py_state_pattern test_py_vectors test_py_startup
               test_py_scipy_cases test_py_stagnation test_py_pressure test_py_sizes)
  add_test(NAME ${module} COMMAND ${KD_PYTHON} -m unittest -v ${module}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(${module} PROPERTIES
    LABELS "e2e;python"
    TIMEOUT 600
    REQUIRED_FILES "${kd_bin}/krylovd;${kd_bin}/krylov;${kd_bin}/example_c_client"
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/client/python:${CMAKE_CURRENT_SOURCE_DIR}/python;KD_BIN_DIR=${kd_bin};KD_SOURCE_DIR=${PROJECT_SOURCE_DIR};KD_TEST_MATRICES=${KD_TEST_MATRICES};PYTHONDONTWRITEBYTECODE=1")
endforeach()

# test_py_climem holds an honest client's spmv to 1 s while hostile clients keep the device busy:
# alone, so that the bound measures the daemon and not other tests on CI's two cores.
set_tests_properties(test_py_climem PROPERTIES RUN_SERIAL TRUE)

# krylovd under mpirun (tests/python/test_py_mpi.py): the same module with 1 rank (the plain
# krylovd, no mpirun), and with 2 and 3 ranks under mpirun (--oversubscribe: CI has 2 cores).
# Label mpi: `make test-asan` leaves those out (-LE mpi), as it does the dist tests: Open MPI's
# own allocations at exit are not ours to chase under LeakSanitizer.
foreach(np 1 2 3)
  if(np GREATER 1 AND NOT KD_MPI)
    continue()
  endif()
  set(labels "e2e;python")
  if(np GREATER 1)
    set(labels "e2e;python;mpi")
  endif()
  add_test(NAME test_py_mpi_np${np} COMMAND ${KD_PYTHON} -m unittest -v test_py_mpi
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(test_py_mpi_np${np} PROPERTIES
    LABELS "${labels}"
    TIMEOUT 180
    PROCESSORS ${np}
    REQUIRED_FILES "${kd_bin}/krylovd"
    ENVIRONMENT "PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}/python;KD_BIN_DIR=${kd_bin};KD_SOURCE_DIR=${PROJECT_SOURCE_DIR};KD_TEST_MATRICES=${KD_TEST_MATRICES};PYTHONDONTWRITEBYTECODE=1;KD_MPI_RANKS=${np};KD_MPIEXEC=${MPIEXEC_EXECUTABLE}")
endforeach()

# The soak (tests/soak/soak.py, `make soak` runs it for 10 minutes): one minute of honest clients
# (answers checked against numpy / SciPy) beside hostile ones, failing on a wrong or lost answer
# or on growth of the daemon's memory, descriptors or device bytes. Label soak, not e2e: under
# ASan (`make test-asan`) the allocator's quarantine grows RSS by design. RUN_SERIAL: the verdict
# compares the daemon's footprint over time and its throughput, which other tests' load on a
# 2-core machine would blur; its CSV, summary and plot are left in the build folder's tests/soak.
# One never-reader, renewed every 5 s, held to 8 MiB of unread answers and 8 requests in flight:
# its buffers come and go, and at the defaults (64 MiB, 64 requests of 800 kB answers) they swing
# the daemon's RSS by 10% within a minute, allocator retention rather than growth (the 10-minute
# runs in docs/OPERATIONS.md, "Soak", show it).
add_test(NAME test_soak COMMAND ${KD_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/soak/soak.py
         --bin-dir ${kd_bin} --minutes 1 --readers 1 --reader-hold-s 5
         "--daemon-args=--max-pending-write 8M --max-jobs-per-connection 8"
         --out ${CMAKE_CURRENT_BINARY_DIR}/soak)
set_tests_properties(test_soak PROPERTIES
  LABELS "soak"
  TIMEOUT 600
  RUN_SERIAL TRUE
  REQUIRED_FILES "${kd_bin}/krylovd"
  ENVIRONMENT "KD_TEST_MATRICES=${KD_TEST_MATRICES};PYTHONDONTWRITEBYTECODE=1")
