// What every SDCA solve of the core is told (the loss, the regularisation,
// CoCoA+'s sigma, the passes and their visiting order), and the pieces the
// solve, the visiting orders and the kernels share: ShrinkL1 and ParallelFor.
#ifndef TF_SDCA_KERNELS_CORE_SOLVER_OPTIONS_H_
#define TF_SDCA_KERNELS_CORE_SOLVER_OPTIONS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/loss.h"

namespace tf_sdca {

// How a pass chooses the rows it visits (visit_order.h draws them).
enum class VisitOrder { kPermutation, kUniform, kCyclic, kAdaptive, kShrinking };

// "permutation", "uniform", "cyclic", "adaptive", "shrinking"; false for
// another name.
inline bool ParseVisitOrder(const char* name, VisitOrder* order) {
  const std::string s(name);
  if (s == "permutation") {
    *order = VisitOrder::kPermutation;
  } else if (s == "uniform") {
    *order = VisitOrder::kUniform;
  } else if (s == "cyclic") {
    *order = VisitOrder::kCyclic;
  } else if (s == "adaptive") {
    *order = VisitOrder::kAdaptive;
  } else if (s == "shrinking") {
    *order = VisitOrder::kShrinking;
  } else {
    return false;
  }
  return true;
}

// The most passes one op call makes (num_passes, num_inner_iterations): a
// call is cancelled only between passes (see SolverOptions::cancelled), so
// a cap on the count still bounds a call nobody cancels.
constexpr int kMaxPasses = 1 << 20;

// Rows between two looks at SolverOptions::cancelled inside a pass (a
// power of two): ~15 ms of solving at the ~4M rows/s of one thread on 20
// dense columns (more on wide rows), against well under a microsecond for
// one look.
constexpr int64_t kCancelCheckRows = 1 << 16;

struct SolverOptions {
  const DualLossUpdater* loss = nullptr;
  double l1 = 0.0;
  double l2 = 1.0;
  int num_loss_partitions = 1;
  int num_inner_iterations = 1;
  VisitOrder order = VisitOrder::kPermutation;
  uint64_t seed = 0;
  // A pass visits part `part` of `num_parts` equal consecutive parts of its
  // visiting order (PartBounds): num_parts calls with the same seed and
  // parts 0 .. num_parts - 1 together visit the rows of one pass's order,
  // each row once ('permutation', 'cyclic'). CoCoA+ exchanges the weights
  // after each part (tf_sdca.distributed). One-thread packed rows only, not
  // with 'adaptive' or 'shrinking' (whose passes are not an order cut up).
  int num_parts = 1;
  int part = 0;
  // Asked before every pass of a solve and every kCancelCheckRows rows in
  // one; true stops the solve there (the kernels pass TensorFlow's step
  // cancellation, so a cancelled step does not run on for the remaining
  // rows and passes). Empty: never cancelled.
  std::function<bool()> cancelled;

  bool Cancelled() const { return cancelled && cancelled(); }
};

// [*begin, *end): the positions of a pass's n-row visiting order that
// part `part` of `num_parts` visits (sizes differ by at most one).
inline void PartBounds(int64_t n, int num_parts, int part, int64_t* begin,
                       int64_t* end) {
  *begin = n * part / num_parts;
  *end = n * (part + 1) / num_parts;
}

// Runs fn(k) for every k in [0, n), possibly concurrently.
using ParallelFor =
    std::function<void(int64_t n, const std::function<void(int64_t)>& fn)>;

// A ParallelFor on std::thread (n calls on min(n, num_threads) threads that
// run at the same time), for use outside TensorFlow and for the lock-free
// threads, which must run at the same time.
inline ParallelFor StdThreadParallelFor(int num_threads) {
  return [num_threads](int64_t n, const std::function<void(int64_t)>& fn) {
    const int64_t workers = std::min<int64_t>(std::max(num_threads, 1), n);
    if (workers <= 1) {
      for (int64_t k = 0; k < n; ++k) fn(k);
      return;
    }
    std::vector<std::thread> threads;
    threads.reserve(workers);
    for (int64_t w = 0; w < workers; ++w) {
      threads.emplace_back([w, workers, n, &fn] {
        for (int64_t k = w; k < n; k += workers) fn(k);
      });
    }
    for (auto& t : threads) t.join();
  };
}

// Soft thresholding used for L1: sign(w) max(|w| - l1 / l2, 0).
inline double ShrinkL1(double w, double shrinkage) {
  if (w > shrinkage) return w - shrinkage;
  if (w < -shrinkage) return w + shrinkage;
  return 0.0;
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_SOLVER_OPTIONS_H_
