# The same spec compiled twice, in two processes with two caches, gives the same cubin byte for
# byte (NVRTC's internal names must not depend on the process or the time).
# -DCLI=kjit-cli -DWORK=<scratch dir>
file(REMOVE_RECURSE ${WORK})
foreach(run a b)
  foreach(spec "rmsnorm;--set;dtype=bf16;--set;hidden=4096"
               "decode_attention;--set;q_dtype=bf16;--set;head_dim=128;--set;group=4")
    execute_process(COMMAND ${CMAKE_COMMAND} -E env KJIT_CACHE_DIR=${WORK}/${run}
                    ${CLI} compile ${spec} --arch sm_90a
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "compile ${spec} failed (${rc}):\n${out}${err}")
    endif()
  endforeach()
endforeach()
file(GLOB_RECURSE cubins RELATIVE ${WORK}/a ${WORK}/a/*.cubin)
list(LENGTH cubins n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected two cubins, found: ${cubins}")
endif()
foreach(c IN LISTS cubins)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/a/${c} ${WORK}/b/${c}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "two compiles of ${c} differ")
  endif()
endforeach()
message(STATUS "two compiles gave identical cubins: ${cubins}")
