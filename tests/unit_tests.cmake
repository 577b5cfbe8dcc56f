# SPDX-License-Identifier: Apache-2.0
# The unit tests (tests/CMakeLists.txt includes this with DLFEED_UNIT_TESTS).
# One test binary per *_test.cc under tests/<stage>/, like the headers they test.
file(GLOB_RECURSE DLFEED_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
# tests/s3/ tests the optional dlfeed::s3 component: only when it is built.
if(NOT TARGET dlfeed_s3_internal)
  list(FILTER DLFEED_TEST_SOURCES EXCLUDE REGEX "/s3/[^/]*_test\\.cc$")
endif()
# Under ThreadSanitizer, the tests of code that starts no thread are left out:
# the parsers, the order and the planner (the plain and ASan builds run them,
# the fuzzers take the parsers). A new test file is in unless named here.
set(DLFEED_SINGLE_THREADED_TESTS batch_test json_test deflate_test example_test npz_test
    tfrecord_compressed_test tfrecord_errors_test tfrecord_framing_test tfrecord_split_test
    checked_backend_test read_op_test stream_copy_test order_test quality_test planner_test
    split_layout_test)
# What every test file includes, precompiled once and reused by every test
# binary (the same flags): a test file's compile parses it no more.
set(DLFEED_TEST_PCH <gtest/gtest.h> <algorithm> <atomic> <chrono> <cstring> <filesystem> <fstream> <functional>
    <future> <map> <memory> <mutex> <random> <set> <string> <thread> <vector> <absl/status/statusor.h>
    <absl/strings/str_cat.h>)
set(_pch_from "")
foreach(src ${DLFEED_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  if(DLFEED_SANITIZE MATCHES "thread" AND name IN_LIST DLFEED_SINGLE_THREADED_TESTS)
    continue()
  endif()
  add_executable(${name} ${src})
  if(name STREQUAL "s3_fork_test" OR name STREQUAL "s3_cache_test")
    # Not with it: there GCC 12 reports its false -Warray-bounds inside
    # <string> (bits/char_traits.h) as if the precompiled headers were ours.
  elseif(_pch_from)
    target_precompile_headers(${name} REUSE_FROM ${_pch_from})
  else()
    target_precompile_headers(${name} PRIVATE ${DLFEED_TEST_PCH})
    set(_pch_from ${name})
  endif()
  target_link_libraries(${name} PRIVATE dlfeed_dev GTest::gtest GTest::gtest_main
                                        absl::strings absl::str_format)
  # src/ too: the pipeline's stages and the I/O engine are private, tested one by one.
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${DLFEED_WARNINGS})
  target_compile_definitions(${name} PRIVATE
    DLFEED_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}/tmp"
    DLFEED_BINARY="$<$<TARGET_EXISTS:dlfeed_cli>:$<TARGET_FILE:dlfeed_cli>>")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300 LABELS unit)
endforeach()

if(TARGET dlfeed_s3_internal)
  target_link_libraries(s3_config_test PRIVATE dlfeed_s3_internal)
  target_link_libraries(s3_fork_test PRIVATE dlfeed_s3_internal)
  target_link_libraries(s3_cache_test PRIVATE dlfeed_s3_internal)
endif()

# The HDF5 tests write fixtures with libhdf5 directly (tests/format/hdf5_fixture.cc).
target_sources(hdf5_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/format/hdf5_fixture.cc)
target_include_directories(hdf5_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(hdf5_test PRIVATE HDF5::HDF5 ZLIB::ZLIB)

# Reliability: fault injection (tests/fault/faults.h) and its checks.
target_sources(fault_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fault/faults.cc
                                  ${CMAKE_CURRENT_SOURCE_DIR}/fault/harness.cc)

# The soak run (tests/fault/soak.cc): a short form in every ctest, a long one by hand.
add_executable(dlfeed_soak ${CMAKE_CURRENT_SOURCE_DIR}/fault/soak.cc ${CMAKE_CURRENT_SOURCE_DIR}/fault/faults.cc
                           ${CMAKE_CURRENT_SOURCE_DIR}/fault/harness.cc)
target_link_libraries(dlfeed_soak PRIVATE dlfeed_dev absl::strings absl::str_format)
target_include_directories(dlfeed_soak PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
set(DLFEED_SOAK_SECONDS 30 CACHE STRING "Seconds of the short soak run ctest does (soak_short)")
add_test(NAME soak_short COMMAND dlfeed_soak --seconds=${DLFEED_SOAK_SECONDS} --dir=${CMAKE_CURRENT_BINARY_DIR}/tmp/soak)
# COST: ctest -j starts it first, so that the others run beside it rather than after.
set_tests_properties(soak_short PROPERTIES LABELS soak TIMEOUT 600 COST 1000)

# The fuzz targets as plain programs over their committed regression inputs.
add_subdirectory(fuzz)

# The DEFLATE decoder is checked against zlib's own deflate and inflate
# (a test TSan leaves out).
if(TARGET deflate_test)
  target_link_libraries(deflate_test PRIVATE ZLIB::ZLIB)
endif()
