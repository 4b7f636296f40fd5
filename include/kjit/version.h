/* kjit version: the single source of truth. CMake parses these three macros. */
#ifndef KJIT_VERSION_H
#define KJIT_VERSION_H

#define KJIT_VERSION_MAJOR 0
#define KJIT_VERSION_MINOR 8
#define KJIT_VERSION_PATCH 0

/* Bumped whenever a public struct layout or function signature changes incompatibly. 2 (kjit
 * 0.3.0): argument order, RoPE / KV layout enums and kjit_sampling_options (kjit.h says which). */
#define KJIT_ABI_VERSION 2

#define KJIT_VERSION_NUMBER \
  (KJIT_VERSION_MAJOR * 10000 + KJIT_VERSION_MINOR * 100 + KJIT_VERSION_PATCH)

#define KJIT_STRINGIFY_(x) #x
#define KJIT_STRINGIFY(x) KJIT_STRINGIFY_(x)
#define KJIT_VERSION_STRING          \
  KJIT_STRINGIFY(KJIT_VERSION_MAJOR) \
  "." KJIT_STRINGIFY(KJIT_VERSION_MINOR) "." KJIT_STRINGIFY(KJIT_VERSION_PATCH)

#endif /* KJIT_VERSION_H */
