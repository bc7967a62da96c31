// The check packed_threads_main and multiclass_blocks_main make of threads
// whose shares run one after another (the timing of a loaded machine): two
// such threads need about one thread's epochs to a relative gap of 1e-8.
#ifndef TF_SDCA_KERNELS_TESTS_SEQUENTIAL_SHARES_H_
#define TF_SDCA_KERNELS_TESTS_SEQUENTIAL_SHARES_H_

#include <cstdio>
#include <string>

#include "kernels/core/visit_order.h"

namespace tf_sdca {

// Prints both counts of epochs (at most `most` each) to stderr; returns
// what failed ("" when two threads took at most 1.5x + 2 one thread's
// epochs and one thread converged).
inline std::string SequentialSharesFailure(VisitOrder order, int one,
                                           int two, int most) {
  const int o = static_cast<int>(order);
  std::fprintf(stderr, "order %d: one thread %d epochs, two sequential %d\n",
               o, one, two);
  if (one < most && two <= 1.5 * one + 2) return "";
  return "order " + std::to_string(o) +
         ": two threads one after another took " + std::to_string(two) +
         " epochs to a gap of 1e-8, one thread " + std::to_string(one);
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_TESTS_SEQUENTIAL_SHARES_H_
