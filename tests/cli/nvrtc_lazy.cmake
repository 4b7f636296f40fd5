# libkjit.so without NVRTC: it does not link libnvrtc, a compile without NVRTC fails with a status
# and a message that says so, and an entry already in the cache is served without NVRTC (its key
# then uses the build's NVRTC version, the version the entry was compiled with here).
# -DLIB=libkjit.so -DCLI=kjit-cli -DWORK=<scratch dir>
execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIB} failed (${rc})")
endif()
if(dyn MATCHES "nvrtc")
  message(FATAL_ERROR "libkjit.so links NVRTC:\n${dyn}")
endif()

file(REMOVE_RECURSE ${WORK})
set(spec rmsnorm --set dtype=bf16 --set hidden=4096 --arch sm_90a)
set(no_nvrtc ${CMAKE_COMMAND} -E env KJIT_CACHE_DIR=${WORK}/cache
             KJIT_NVRTC_PATH=${WORK}/no-such-dir/libnvrtc.so)
execute_process(COMMAND ${no_nvrtc} ${CLI} compile ${spec}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "NVRTC \\(libnvrtc[.]so[.][0-9]+\\) could not be loaded")
  message(FATAL_ERROR "a compile without NVRTC gave rc ${rc}:\n${out}${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env KJIT_CACHE_DIR=${WORK}/cache ${CLI} compile ${spec}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compile with NVRTC failed (${rc}):\n${out}${err}")
endif()
execute_process(COMMAND ${no_nvrtc} ${CLI} compile ${spec} --json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the cached entry was not served without NVRTC (rc ${rc}):\n${out}${err}")
endif()
string(JSON cached GET "${out}" cached)
if(NOT cached EQUAL 1)
  message(FATAL_ERROR "expected one cached entry without NVRTC:\n${out}")
endif()
message(STATUS "no NVRTC linked; compile refused without it; the cached entry served without it")
