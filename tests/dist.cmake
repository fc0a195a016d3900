# Matrices spread over ranks (dist/). The partition and the halo plan on the host, without MPI
# (unit: it also runs under ASan); the device blocks, SpMV and solves under a real mpirun with
# 1, 2 and 3 ranks (label mpi, which `make test-asan` leaves out: it runs -L 'unit|e2e').
kd_add_test(test_dist_plan SOURCES test_dist_plan.c LIBS kd_dist_plan LABELS unit TIMEOUT 120)
if(KD_MPI)
  # kd_add_mpi_test(NAME SOURCES ... LIBS ... TIMEOUT s): NAME_np1, NAME_np2, NAME_np3, each the
  # same program under mpirun (--oversubscribe: CI has 2 cores). Root is allowed in containers.
  function(kd_add_mpi_test name)
    cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE ${T_LIBS})
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_compile_definitions(${name} PRIVATE KD_TEST_MATRICES="${KD_TEST_MATRICES}")
    foreach(np 1 2 3)
      add_test(NAME ${name}_np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                       $<TARGET_FILE:${name}>)
      # Shared memory only, and ranks that yield when idle: the ranks share 2 cores with PoCL's
      # threads, and a busy-polling rank would starve the device of the rank it waits for.
      set_tests_properties(${name}_np${np} PROPERTIES LABELS "mpi;kernel" TIMEOUT ${T_TIMEOUT}
        PROCESSORS ${np}
        ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_btl=self,vader;OMPI_MCA_mpi_yield_when_idle=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    endforeach()
  endfunction()
  kd_add_mpi_test(test_dist_spmv SOURCES test_dist_spmv.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
                  LIBS kd_dist kd_protocol PkgConfig::ZLIB TIMEOUT 300)
endif()
if(KD_MPI)
  kd_add_mpi_test(test_dist_solve SOURCES test_dist_solve.c ${PROJECT_SOURCE_DIR}/client/mtx_file.c
                  LIBS kd_dist kd_protocol PkgConfig::ZLIB TIMEOUT 400)
endif()
