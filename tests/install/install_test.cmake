# Installs the build tree into a fresh prefix, then configures, builds and runs a consumer that
# uses find_package(kjit) and links kjit::kjit; also checks the pkg-config file and kjit-cli.
set(prefix "${WORK}/prefix")
file(REMOVE_RECURSE "${WORK}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
foreach(f include/kjit/kjit.h include/kjit/version.h lib/cmake/kjit/kjitConfig.cmake
          lib/cmake/kjit/kjitConfigVersion.cmake lib/pkgconfig/kjit.pc bin/kjit-cli)
  if(NOT EXISTS "${prefix}/${f}")
    string(REPLACE "lib/" "lib64/" f64 "${f}")
    if(NOT EXISTS "${prefix}/${f64}")
      message(FATAL_ERROR "missing after install: ${f}")
    endif()
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SRC}" -B "${WORK}/build" -DCMAKE_PREFIX_PATH=${prefix}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer configure failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK}/build" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer build failed:\n${out}\n${err}")
endif()
execute_process(COMMAND "${WORK}/build/consumer" RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer failed: ${rc}")
endif()
