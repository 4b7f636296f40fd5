/* Plain C: the header must be C99-clean and the library must report the header's version. */
#include <kjit/kjit.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  printf("kjit %s abi %d\n", kjit_version_string(), kjit_abi_version());
  if (strcmp(kjit_version_string(), KJIT_VERSION_STRING) != 0) return 1;
  if (kjit_abi_version() != KJIT_ABI_VERSION) return 1;
  /* A NULL tensor is an argument error with a message, never a crash. */
  if (kjit_rmsnorm(NULL, NULL, NULL, 1e-6f, NULL) != KJIT_ERROR_INVALID_ARGUMENT) return 1;
  printf("%s: %s\n", kjit_status_string(KJIT_ERROR_INVALID_ARGUMENT), kjit_last_error());
  /* The enums and versioned option structs are plain C too. */
  kjit_sampling_options options;
  kjit_sampling_options_init(&options);
  if (options.struct_size != sizeof options) return 1;
  if (kjit_softmax(NULL, NULL, NULL, &options, NULL) != KJIT_ERROR_INVALID_ARGUMENT) return 1;
  kjit_rope_layout layout = KJIT_ROPE_INTERLEAVED;
  if (kjit_apply_rope_with_cos_sin_cache(NULL, NULL, NULL, NULL, 128, layout, NULL) !=
      KJIT_ERROR_INVALID_ARGUMENT) {
    return 1;
  }
  return 0;
}
