// kjit_sampling_options in one expression, for tests and the bench: the defaults
// (kjit_sampling_options_init) with the fields a call sets, passed where the C function takes
// `const kjit_sampling_options*`:
//   kjit_top_k_renorm_probs(probs, nullptr, out, SamplingOptions().top_k(5), stream);
#pragma once

#include "kjit/kjit.h"

namespace kjit::test {

class SamplingOptions {
 public:
  SamplingOptions() { kjit_sampling_options_init(&o_); }
  SamplingOptions& top_k(int v) {
    o_.top_k = v;
    return *this;
  }
  SamplingOptions& top_p(float v) {
    o_.top_p = v;
    return *this;
  }
  SamplingOptions& min_p(float v) {
    o_.min_p = v;
    return *this;
  }
  SamplingOptions& temperature(float v) {
    o_.temperature = v;
    return *this;
  }
  // Valid while this object lives (a temporary: to the end of the call it is an argument of).
  operator const kjit_sampling_options*() const { return &o_; }  // NOLINT: an argument
  const kjit_sampling_options& get() const { return o_; }

 private:
  kjit_sampling_options o_;
};

}  // namespace kjit::test
