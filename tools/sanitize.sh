#!/usr/bin/env bash
# The host code under the sanitizers; tools/test.sh runs both kinds, docs/reliability.md has the
# results. The [gpu] tests skip without a GPU (compute-sanitizer covers their kernels on the H200).
#
#   tools/sanitize.sh [address|thread] [CTEST ARGS...]
#     address (default): clang, ASan + UBSan (LeakSanitizer on), build-asan/: the library,
#                        kjit-cli, every test binary and the libFuzzer targets (the same objects,
#                        with coverage feedback: tools/fuzz.sh runs them); then the whole CTest
#                        suite, the [gpu] tests included (they skip without a GPU)
#     thread:            gcc, TSan, build-tsan/: the library, kjit-cli, the unit and reliability
#                        tests; then the cases where threads share memory (the reliability threads
#                        tests, the unit per-thread-error and call-log threads cases, the fetch
#                        cases, whose kjit-cli runs 4 transfer threads) and the JIT and disk cache
#                        cases (lock-order checks)
#   KJIT_SANITIZE_BUILD_ONLY=1     configure and build, run nothing
#   KJIT_SANITIZE_TARGETS="A B"    build only these targets (default: all the tests need)
#   KJIT_SANITIZE_CXXFLAGS="-O1"   optimization and debug flags (default "-O0 -g1": half the
#                                  compile time of -O1 on 2 cores; -O1 fuzzes faster)
# Extra arguments go to ctest (e.g. -R 'reliability:kill'). Exits non-zero on any report: every
# sanitizer halts the process at its first report, which fails the test.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-address}"
shift || true
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
bash tools/deps.sh

case "$kind" in
  address)
    build="${KJIT_ASAN_BUILD_DIR:-build-asan}"
    # clang: the fuzz targets link these objects too. The install test builds its C consumer
    # with the same sanitizers (tests/CMakeLists.txt).
    config=(-DCMAKE_CXX_COMPILER=clang++ -DKJIT_SANITIZE=address -DKJIT_BUILD_FUZZERS=ON)
    targets=()
    regex=''
    ;;
  thread)
    build="${KJIT_TSAN_BUILD_DIR:-build-tsan}"
    # gcc: CI then also compiles the host code with the compiler developers use (and clang 14's
    # TSan runtime clashes with the operator new that tests/unit/call_log_test.cpp replaces).
    config=(-DCMAKE_CXX_COMPILER=g++ -DKJIT_SANITIZE=thread)
    targets=(kjit_unit_tests kjit_reliability_tests)
    regex='^(reliability:threads|unit:(jit|disk cache|fetch|call log: blocks from threads'
    regex+='|c abi: .*per thread))'
    ;;
  *)
    echo "usage: tools/sanitize.sh [address|thread] [ctest args...]" >&2
    exit 2
    ;;
esac
if [ -n "${KJIT_SANITIZE_TARGETS:-}" ]; then read -r -a targets <<<"$KJIT_SANITIZE_TARGETS"; fi

# Debug: assertions on (nlohmann::json's among them) and -O0 (see KJIT_SANITIZE_CXXFLAGS).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="${KJIT_SANITIZE_CXXFLAGS:--O0 -g1}" -DKJIT_UNITY_BUILD=ON \
  -DCUDAToolkit_ROOT="$cuda_home" "${config[@]}" >/dev/null
if ((${#targets[@]})); then
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
else
  cmake --build "$build" -j "$(nproc)"
fi
if [ "${KJIT_SANITIZE_BUILD_ONLY:-0}" = 1 ]; then exit 0; fi

# NVRTC is not instrumented: its allocations that live for the process are not our leaks.
supp="$PWD/$build/lsan.supp"
printf 'leak:libnvrtc\nleak:libnvrtc-builtins\n' >"$supp"
# protect_shadow_gap=0: the CUDA driver maps memory there (where a GPU runs the [gpu] tests).
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1"
ASAN_OPTIONS+=":detect_stack_use_after_return=1:protect_shadow_gap=0"
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# intercept_tls_get_addr=0: gcc 12's TSan runtime dies ("failed to allocate 0x1ec2ffffff000
# bytes") in its __tls_get_addr hook when libgnutls, which the dlopen'ed libcurl loads, runs its
# destructors at exit. Our thread_locals are static TLS (kjit is linked into each test binary).
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:intercept_tls_get_addr=0"
export KJIT_CACHE_DIR="${KJIT_TEST_CACHE_DIR:-$PWD/$build/test-cache}"
rm -rf "$KJIT_CACHE_DIR"
log="$build/ctest-output.log"
rc=0
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)" -O "$log" \
  ${regex:+-R "$regex"} "$@" || rc=$?
# LeakSanitizer's stop-the-world tracer itself crashes at exit ("Tracer caught signal 11",
# google/sanitizers#1353), after the test passed: not a leak and not ours. It dies while scanning
# the main thread's TLS once the uninstrumented NVRTC has been loaded (on this runner the
# corruption tests that recompile hit it every time). Only when that signature is in the output
# are the failed tests run once more, with TLS not scanned as a root (use_tls=0): that can only
# report more, never hide a leak, except glibc's own second-level pthread key block, which the
# thread descriptor alone points to (suppressed). A real failure fails again.
if ((rc != 0)) && grep -q 'LeakSanitizer has encountered a fatal error' "$log"; then
  echo "tools/sanitize.sh: LeakSanitizer's tracer crashed; running the failed tests once more" \
    "without scanning TLS"
  printf 'leak:pthread_setspecific\n' >>"$supp"
  rc=0
  LSAN_OPTIONS+=":use_tls=0" ctest --test-dir "$build" --output-on-failure --rerun-failed || rc=$?
fi
exit "$rc"
