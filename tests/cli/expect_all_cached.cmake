# Runs `compile --all` on the cache the previous test filled and fails unless nothing compiles and
# every specialization of the catalog was served from it: the count must be the catalog's own, so
# a catalog that lost rows (or a plan that dropped items) does not pass as "all cached"; and
# unless none of them carries a ptxas performance advisory.
set(archs "sm_80 sm_90 sm_90a")

# The catalog's size: every op's catalog rows (`ops --json`). Each is one specialization, and
# sm_90a takes every op, so that many items target sm_90a (two rows naming one specialization
# would break this, and should not exist).
execute_process(COMMAND ${CLI} ops --json OUTPUT_VARIABLE ops RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ops --json failed (${rc}):\n${ops}")
endif()
string(JSON nops LENGTH "${ops}" ops)
set(rows 0)
math(EXPR last "${nops} - 1")
foreach(i RANGE ${last})
  string(JSON n GET "${ops}" ops ${i} catalog_size)
  math(EXPR rows "${rows} + ${n}")
endforeach()

# The items of the plan, counted without compiling: on an empty cache with KJIT_DISABLE_JIT=1
# each one fails at once (no package can serve it either).
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=KJIT_AOT_DIR --unset=KJIT_ARTIFACT_URL
          KJIT_DISABLE_JIT=1 KJIT_CACHE_DIR=${CACHE}-count
          ${CLI} compile --all --arch "${archs}" --json
  OUTPUT_VARIABLE plan RESULT_VARIABLE rc)
file(REMOVE_RECURSE ${CACHE}-count)
string(JSON planned LENGTH "${plan}" failures)
string(JSON plan_ok GET "${plan}" compiled)
string(JSON plan_cached GET "${plan}" cached)
if(NOT plan_ok EQUAL 0 OR NOT plan_cached EQUAL 0)
  message(FATAL_ERROR "counting the catalog under KJIT_DISABLE_JIT=1 built something:\n${plan}")
endif()
set(sm90a 0)
if(planned GREATER 0)
  math(EXPR last "${planned} - 1")
  foreach(i RANGE ${last})
    string(JSON arch GET "${plan}" failures ${i} arch)
    if(arch STREQUAL "sm_90a")
      math(EXPR sm90a "${sm90a} + 1")
    endif()
  endforeach()
endif()
if(rows LESS 100 OR NOT sm90a EQUAL rows OR planned LESS rows)
  message(FATAL_ERROR "catalog of ${rows} rows, but compile --all plans ${planned} items, "
                      "${sm90a} of them for sm_90a")
endif()

execute_process(
  COMMAND ${CMAKE_COMMAND} -E env KJIT_CACHE_DIR=${CACHE}
          ${CLI} compile --all --arch "${archs}" --json
  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compile --all failed (${rc}):\n${out}")
endif()
string(JSON compiled GET "${out}" compiled)
string(JSON cached GET "${out}" cached)
string(JSON failed GET "${out}" failed)
if(NOT compiled EQUAL 0 OR NOT failed EQUAL 0 OR NOT cached EQUAL planned)
  message(FATAL_ERROR "expected all ${planned} cached: compiled=${compiled} cached=${cached} "
                      "failed=${failed}")
endif()
# No specialization may carry a ptxas "Potential Performance Loss" note (C75xx, recorded in its
# sidecar when it compiled): such a kernel does not run as written (every wgmma serialized, ...).
string(JSON advised GET "${out}" ptxas_advisories)
if(NOT advised EQUAL 0)
  message(FATAL_ERROR "${advised} specializations carry ptxas performance advisories; "
                      "`kjit-cli compile --all --arch '${archs}'` on this cache lists them")
endif()
message(STATUS "all ${cached} entries (a catalog of ${rows} rows) served from the cache, none "
               "with a ptxas performance advisory")
