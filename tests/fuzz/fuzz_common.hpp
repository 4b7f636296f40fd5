// Shared by the libFuzzer targets (tests/fuzz, tools/fuzz.sh). A target may see kjit::Error, the
// library's one way to refuse input; anything else escaping (another exception type, a crash, a
// sanitizer report, a broken invariant) is a finding.
#pragma once

#include <cstdio>
#include <cstdlib>

// Aborts with a message when an invariant of accepted input does not hold.
#define FUZZ_ASSERT(cond)                                                               \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
