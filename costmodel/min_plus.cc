#include "costmodel/min_plus.h"

namespace stratos {

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define STRATOS_MIN_PLUS_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef STRATOS_MIN_PLUS_CLONES
#define STRATOS_MIN_PLUS_CLONES
#endif

STRATOS_MIN_PLUS_CLONES void MinPlusInto(double* __restrict out, const double* __restrict in,
                                         double add, int count) {
  for (int k = 0; k < count; ++k) {
    const double v = in[k] + add;
    out[k] = v < out[k] ? v : out[k];
  }
}

}  // namespace stratos
