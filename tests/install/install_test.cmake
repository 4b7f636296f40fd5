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
                        -DKJIT_WANT_VERSION=${WANT}
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

# pkg-config: the installed kjit.pc (prefix relative to its folder) must compile and link the same
# consumer from this prefix, which is not the one the build was configured with.
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (tools/deps.sh installs it)")
endif()
file(GLOB_RECURSE pc_files "${prefix}/*/kjit.pc")
list(GET pc_files 0 pc)
get_filename_component(pc_dir "${pc}" DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir}
                ${PKG_CONFIG} --cflags --libs kjit
                OUTPUT_VARIABLE flags RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs kjit failed (${rc}): '${flags}'")
endif()
# The include dir it names is this prefix's (the build was configured for another prefix).
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir}
                ${PKG_CONFIG} --variable=includedir kjit
                OUTPUT_VARIABLE inc OUTPUT_STRIP_TRAILING_WHITESPACE)
get_filename_component(inc "${inc}" REALPATH)
get_filename_component(want "${prefix}/include" REALPATH)
if(NOT inc STREQUAL want)
  message(FATAL_ERROR "kjit.pc's includedir is '${inc}', not this prefix's '${want}'")
endif()
separate_arguments(flag_list UNIX_COMMAND "${flags}")
if(DEFINED ENV{CC})
  separate_arguments(cc UNIX_COMMAND "$ENV{CC} $ENV{CFLAGS}")
else()
  set(cc cc)
endif()
separate_arguments(ldflags UNIX_COMMAND "$ENV{LDFLAGS}")
execute_process(COMMAND ${cc} "${SRC}/main.c" ${flag_list} ${ldflags} -o "${WORK}/pc_consumer"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compiling the consumer with pkg-config's flags failed:\n${out}\n${err}")
endif()
get_filename_component(libdir "${pc_dir}" DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${libdir} "${WORK}/pc_consumer"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the pkg-config consumer failed: ${rc}\n${out}")
endif()
message(STATUS "pkg-config consumer: ${out}")
