# Builds examples/engine against the prefix the install test just filled (FIXTURES_REQUIRED), as a
# user of the installed package would, and runs its checkpoint-loader and scheduler tests, which
# need no GPU.
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
# The engine links and starts (no GPU needed to print its usage): exit status 2 and the usage.
execute_process(COMMAND "${WORK}/engine/kjit-engine" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "usage: kjit-engine MODEL_DIR")
  message(FATAL_ERROR "kjit-engine without arguments: status ${rc}, not 2 and its usage:\n${err}")
endif()
execute_process(COMMAND "${WORK}/engine/engine_loader_test" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "engine_loader_test failed: ${rc}")
endif()
execute_process(COMMAND "${WORK}/engine/engine_scheduler_test" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "engine_scheduler_test failed: ${rc}")
endif()
