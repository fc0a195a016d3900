# Installation and packaging: the DESTDIR tree, the systemd unit, the Debian package.
add_test(NAME test_install COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_install.sh ${PROJECT_BINARY_DIR})
set_tests_properties(test_install PROPERTIES LABELS "install" TIMEOUT 300 RUN_SERIAL TRUE)

# MemoryDenyWriteExecute=yes in the unit is only safe if the OpenCL driver never needs W+X memory:
# run the daemon under the same kernel policy (PR_SET_MDWE) and solve.
add_executable(mdwe_exec tools/mdwe_exec.c)
add_test(NAME test_mdwe COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_mdwe.sh
         ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${KD_TEST_MATRICES})
set_tests_properties(test_mdwe PROPERTIES LABELS "e2e" TIMEOUT 300)
