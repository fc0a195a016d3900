# libFuzzer targets (-DKD_FUZZ=ON with clang; the whole build then carries -fsanitize=
# fuzzer-no-link,address,undefined). Each runs under ctest for KD_FUZZ_SECONDS from its seed
# corpus in tests/fuzz/corpus/<name>/; new inputs go to the build tree, never the source tree.
#   CC=clang cmake -S . -B build-fuzz -DKD_FUZZ=ON && cmake --build build-fuzz --target fuzz_all
#   (cd build-fuzz && ctest -L fuzz --output-on-failure)
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "KD_FUZZ=ON needs clang: configure with CC=clang")
endif()
set(KD_FUZZ_SECONDS 60 CACHE STRING "Seconds each fuzz target runs under ctest")

add_custom_target(fuzz_all)
foreach(name request mtx)
  add_executable(fuzz_${name} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_${name}.c)
  target_link_libraries(fuzz_${name} PRIVATE kd_protocol)
  target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  add_dependencies(fuzz_all fuzz_${name})
  set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus/${name})
  file(MAKE_DIRECTORY ${work})
  set(dict "")
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${name}.dict)
    set(dict -dict=${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${name}.dict)
  endif()
  add_test(NAME fuzz_${name}
           COMMAND fuzz_${name} -max_total_time=${KD_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
                   -print_final_stats=1 ${dict} ${work} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  math(EXPR limit "${KD_FUZZ_SECONDS} + 120")
  set_tests_properties(fuzz_${name} PROPERTIES LABELS fuzz TIMEOUT ${limit})
endforeach()

add_executable(gen_request_corpus ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/gen_request_corpus.c)
target_link_libraries(gen_request_corpus PRIVATE kd_protocol)

# A spread matrix's block as persisted and sent between ranks (dist/block_pack.c).
add_executable(fuzz_dist_block ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_dist_block.c)
target_link_libraries(fuzz_dist_block PRIVATE kd_dist_plan)
target_link_options(fuzz_dist_block PRIVATE -fsanitize=fuzzer)
add_dependencies(fuzz_all fuzz_dist_block)
set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus/dist_block)
file(MAKE_DIRECTORY ${work})
add_test(NAME fuzz_dist_block
         COMMAND fuzz_dist_block -max_total_time=${KD_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
                 -print_final_stats=1 ${work} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/dist_block)
math(EXPR limit "${KD_FUZZ_SECONDS} + 120")
set_tests_properties(fuzz_dist_block PROPERTIES LABELS fuzz TIMEOUT ${limit})
