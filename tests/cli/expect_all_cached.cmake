# Runs `compile --all` on the cache the previous test filled and fails unless nothing compiles.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env KJIT_CACHE_DIR=${CACHE}
          ${CLI} compile --all --arch "sm_80 sm_90 sm_90a" --json
  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compile --all failed (${rc}):\n${out}")
endif()
string(JSON compiled GET "${out}" compiled)
string(JSON cached GET "${out}" cached)
string(JSON failed GET "${out}" failed)
if(NOT compiled EQUAL 0 OR NOT failed EQUAL 0 OR cached LESS 100)
  message(FATAL_ERROR "expected all cached: compiled=${compiled} cached=${cached} failed=${failed}")
endif()
message(STATUS "all ${cached} entries served from the cache")
