# Builds examples/engine against the prefix the install test just filled (FIXTURES_REQUIRED), as a
# user of the installed package would, and runs its checkpoint-loader test, which needs no GPU.
set(prefix "${WORK}/prefix")
if(NOT EXISTS "${prefix}")
  message(FATAL_ERROR "no install prefix at ${prefix}: the install test runs first")
endif()
set(args -S "${SRC}" -B "${WORK}/engine" -DCMAKE_PREFIX_PATH=${prefix}
         -DCMAKE_BUILD_TYPE=Release)
if(CUDA_ROOT)
  list(APPEND args -DCUDAToolkit_ROOT=${CUDA_ROOT})
endif()
if(LAUNCHER)
  list(APPEND args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "engine example configure failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK}/engine" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "engine example build failed:\n${out}\n${err}")
endif()
if(NOT EXISTS "${WORK}/engine/kjit-engine")
  message(FATAL_ERROR "kjit-engine was not built (no CUDA toolkit found?)")
endif()
execute_process(COMMAND "${WORK}/engine/engine_loader_test" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "engine_loader_test failed: ${rc}")
endif()
