# Flags and helpers shared by every dsv41 target.

# model.md §12.8: no FMA contraction anywhere (GCC contracts a*b+c by default), never fast-math.
set(DSV41_COMMON_FLAGS -ffp-contract=off -fno-fast-math -Wall -Wextra -Wpedantic -Wno-unused-parameter)
if(DSV41_WERROR)
  list(APPEND DSV41_COMMON_FLAGS -Werror)
endif()
set(DSV41_SANITIZE_FLAGS)
if(DSV41_SANITIZE)
  # -O1: the sanitizers' recommended level (several times faster than -O0, every check kept).
  set(DSV41_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1)
endif()
if(DSV41_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "DSV41_FUZZ=ON needs clang (libFuzzer): CC=clang CXX=clang++ cmake ...")
  endif()
  # Every target gets coverage instrumentation and ASan+UBSan, so the fuzzers see into the
  # libraries; only dsv41_fuzzer executables link libFuzzer's main (-fsanitize=fuzzer).
  set(DSV41_SANITIZE_FLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                           -fno-omit-frame-pointer)
endif()

set(DSV41_SOURCE_DIR ${CMAKE_SOURCE_DIR}/src)
# Absolute paths of the shared material the tests read (never edited).
set(DSV41_SHARED_DIR "${CMAKE_SOURCE_DIR}/../shared" CACHE PATH "The shared/ folder (spec, goldens, data)")

function(dsv41_target_defaults target)
  target_compile_options(${target} PRIVATE ${DSV41_COMMON_FLAGS} ${DSV41_SANITIZE_FLAGS})
  target_link_options(${target} PRIVATE ${DSV41_SANITIZE_FLAGS})
  target_include_directories(${target} PUBLIC ${DSV41_SOURCE_DIR})
endfunction()

# dsv41_library(NAME SOURCES ... DEPS ...): one library per layer folder.
function(dsv41_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  dsv41_target_defaults(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# dsv41_test(NAME SOURCES ... DEPS ... [LABELS ...] [WHOLE] [SIMD_CAPS] [FAST_KERNELS]): a
# GoogleTest binary registered with CTest, one CTest test per GoogleTest test, each carrying the
# CTest LABELS (`server`, `dspark`: ctest -L / -LE select by them; `slow`: left out of the
# sanitizer job). WHOLE registers the binary as one CTest test instead (named NAME), so that a
# heavy fixture it loads once serves all its tests. Every binary's main is kernels/test_main.cc,
# so DSV41_SIMD and DSV41_FAST_KERNEL force the kernels of any run (exit 77, skipped, where the
# CPU lacks the unit asked for).
function(dsv41_test name)
  cmake_parse_arguments(ARG "WHOLE;SIMD_CAPS;FAST_KERNELS;AMX_KERNEL" "" "SOURCES;DEPS;LABELS"
                        ${ARGN})
  # A job that runs `ctest -LE slow` (the sanitizer job) need not build them at all.
  if("slow" IN_LIST ARG_LABELS AND NOT DSV41_SLOW_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  dsv41_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} dsv41_test_main GTest::gtest GTest::gmock)
  target_compile_definitions(${name} PRIVATE DSV41_SHARED_DIR="${DSV41_SHARED_DIR}"
                                             DSV41_SOURCE_ROOT="${CMAKE_SOURCE_DIR}")
  if(ARG_WHOLE)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "DSV41_SHARED_DIR=${DSV41_SHARED_DIR}"
                                            SKIP_RETURN_CODE 77 LABELS "${ARG_LABELS}")
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                         PROPERTIES ENVIRONMENT "DSV41_SHARED_DIR=${DSV41_SHARED_DIR}"
                                    SKIP_RETURN_CODE 77 LABELS "${ARG_LABELS}")
  endif()
  # SIMD_CAPS: every test once more with the kernels capped at AVX2 and once at the scalar code
  # (kernels/simd_cap.h), named <test>/avx2 and <test>/scalar, labelled slow.
  if(ARG_SIMD_CAPS)
    foreach(cap avx2 scalar)
      gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_SUFFIX "/${cap}"
                           EXTRA_ARGS --simd ${cap}
                           PROPERTIES ENVIRONMENT "DSV41_SHARED_DIR=${DSV41_SHARED_DIR}"
                                      LABELS slow SKIP_RETURN_CODE 77)
    endforeach()
  endif()
  # FAST_KERNELS: every test once more under each fast kernel forced (kernels/linear.h FastKernel),
  # named <test>/fma and <test>/bf16-dot, labelled slow, so that a test fragile to the kernel the
  # CPU picks fails on every machine. Skipped (and said so) where the CPU lacks AVX512-BF16.
  if(ARG_FAST_KERNELS)
    foreach(kernel fma bf16-dot)
      gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_SUFFIX "/${kernel}"
                           EXTRA_ARGS --fast-kernel ${kernel}
                           PROPERTIES ENVIRONMENT "DSV41_SHARED_DIR=${DSV41_SHARED_DIR}"
                                      LABELS slow SKIP_RETURN_CODE 77)
    endforeach()
  endif()
  # AMX_KERNEL: every test once more under the AMX tile kernel forced (<test>/amx, labelled slow):
  # on the tiles where the CPU has them, else on the scalar model of the tiles (slow; the binary
  # says which).
  if(ARG_AMX_KERNEL)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_SUFFIX "/amx"
                         EXTRA_ARGS --fast-kernel amx
                         PROPERTIES ENVIRONMENT "DSV41_SHARED_DIR=${DSV41_SHARED_DIR}"
                                    LABELS slow SKIP_RETURN_CODE 77)
  endif()
endfunction()

# dsv41_test_binary(NAME SOURCES ... DEPS ...): a GoogleTest binary as dsv41_test builds it, not
# registered with CTest (dsv41_mpi_test runs it under mpirun).
function(dsv41_test_binary name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  dsv41_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} dsv41_test_main GTest::gtest GTest::gmock)
  target_compile_definitions(${name} PRIVATE DSV41_SHARED_DIR="${DSV41_SHARED_DIR}"
                                             DSV41_SOURCE_ROOT="${CMAKE_SOURCE_DIR}")
endfunction()

# dsv41_benchmark(NAME SOURCES ... DEPS ...): a Google Benchmark program (not a test).
function(dsv41_benchmark name)
  if(NOT DSV41_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  dsv41_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()

# dsv41_fuzzer(NAME SOURCES ... DEPS ...): a libFuzzer target (clang, DSV41_FUZZ=ON).
function(dsv41_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  dsv41_target_defaults(${name})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# dsv41_fuzz_target(NAME SOURCES ... DEPS ... CORPUS dir): a fuzz target (a file defining
# LLVMFuzzerTestOneInput) built twice: as the libFuzzer binary NAME when DSV41_FUZZ=ON, and always
# as NAME_corpus, the same code over fuzz/corpus_runner.cc, registered with CTest to run every file
# of the seed corpus CORPUS (STYLE.md §11), so the seeds also run under GCC and the sanitizer build.
function(dsv41_fuzz_target name)
  cmake_parse_arguments(ARG "" "CORPUS" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_CORPUS)
    message(FATAL_ERROR "dsv41_fuzz_target(${name}): CORPUS <dir> is required")
  endif()
  if(DSV41_FUZZ)
    dsv41_fuzzer(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS})
  endif()
  add_executable(${name}_corpus ${ARG_SOURCES} ${CMAKE_SOURCE_DIR}/fuzz/corpus_runner.cc)
  dsv41_target_defaults(${name}_corpus)
  target_link_libraries(${name}_corpus PRIVATE ${ARG_DEPS} dsv41_base)
  add_test(NAME ${name}_corpus COMMAND ${name}_corpus ${ARG_CORPUS})
endfunction()

# dsv41_mpi_test(NAME TARGET NP N [BTL self,vader] [ARGS ...] [ENV VAR=VALUE ...] [LABELS ...]
# [PASS_REGEX re]): runs test binary TARGET under `mpirun -np N` as one CTest test (every rank
# runs it; a failure on any rank fails the job). Oversubscribed, one compute thread per rank,
# allowed as root (containers), wrapped in `timeout` so a hung job fails instead of stalling CI.
# Labelled `mpi`; under the sanitizers OpenMPI's own allocations that live until exit are
# suppressed (tests/mpi/lsan.supp, with the slow unwinder so that the stacks reach OpenMPI). PASS_REGEX: the test passes on that output (a job that must
# end in error). Nothing without MPI.
function(dsv41_mpi_test name)
  cmake_parse_arguments(ARG "" "TARGET;NP;BTL;PASS_REGEX;TIMEOUT" "ARGS;ENV;LABELS" ${ARGN})
  if(NOT MPI_C_FOUND OR NOT DSV41_MPIEXEC OR NOT TARGET ${ARG_TARGET})
    return()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  set(mca)
  if(ARG_BTL)
    set(mca --mca btl ${ARG_BTL})
  endif()
  add_test(NAME ${name}
           COMMAND timeout ${ARG_TIMEOUT} ${DSV41_MPIEXEC} -np ${ARG_NP} --oversubscribe ${mca}
                   $<TARGET_FILE:${ARG_TARGET}> ${ARG_ARGS})
  set(env DSV41_SHARED_DIR=${DSV41_SHARED_DIR} OMPI_MCA_rmaps_base_oversubscribe=1
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ${ARG_ENV})
  if(DSV41_SANITIZE)
    # OpenMPI's plugins have no frame pointers: the slow unwinder reaches the OpenMPI frames the
    # suppressions name (the fast one stops in the plugin, which is unloaded by then).
    list(APPEND env LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/mpi/lsan.supp
         ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0)
  endif()
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}" LABELS "mpi;${ARG_LABELS}"
                                          PROCESSORS 2 TIMEOUT ${ARG_TIMEOUT})
  if(ARG_PASS_REGEX)
    set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${ARG_PASS_REGEX}")
  endif()
endfunction()
