// C entry point of the embedding family.
#include "api/entry.hpp"
#include "ops/embedding/embedding.hpp"

extern "C" {

KJIT_API kjit_status kjit_embedding(const DLTensor* table, const DLTensor* ids, DLTensor* out,
                                    void* stream) {
  return kjit::api::entry<&kjit_embedding>([&] { kjit::ops::embedding(table, ids, out, stream); },
                                           table, ids, out, stream);
}

}  // extern "C"
