// The SDCA inner loop over one mini-batch, independent of TensorFlow: one
// thread solving the batch against a copy of its weights, CoCoA+-scaled by
// num_loss_partitions, returning the change. (Splitting the batch into
// shards merged every 32 rows was slower than one thread on every machine
// measured, g3doc/benchmarks.md; threads are packed rows' business,
// resident.h.)
#ifndef TF_SDCA_KERNELS_CORE_SOLVER_H_
#define TF_SDCA_KERNELS_CORE_SOLVER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/core/loss.h"

namespace tf_sdca {

// A dense feature group: row-major [num_examples, dim], weights at
// slots [slot_offset, slot_offset + dim).
struct DenseBlock {
  const float* data = nullptr;
  int64_t dim = 0;
  int64_t slot_offset = 0;
};

// Non-owning view of a batch. Sparse features of all groups are in one CSR
// structure whose columns are "slots": positions in the concatenated weight
// vector of the batch (sparse groups first, then dense groups).
struct ExamplesView {
  int64_t num_examples = 0;
  const int64_t* row_ptr = nullptr;  // [num_examples + 1]
  const uint32_t* slots = nullptr;   // [row_ptr[num_examples]]
  const float* values = nullptr;     // same length; nullptr means all 1.0
  std::vector<DenseBlock> dense;
  const double* labels = nullptr;         // converted by the loss
  const float* weights = nullptr;         // example weights >= 0
  const double* squared_norms = nullptr;  // |x_i|^2
};

enum class VisitOrder { kPermutation, kUniform, kCyclic, kAdaptive };

bool ParseVisitOrder(const char* name, VisitOrder* order);

struct SolverOptions {
  const DualLossUpdater* loss = nullptr;
  double l1 = 0.0;
  double l2 = 1.0;
  int num_loss_partitions = 1;
  int num_inner_iterations = 1;
  VisitOrder order = VisitOrder::kPermutation;
  uint64_t seed = 0;
};

// Runs fn(k) for every k in [0, n), possibly concurrently.
using ParallelFor =
    std::function<void(int64_t n, const std::function<void(int64_t)>& fn)>;

// A ParallelFor on std::thread (n calls on min(n, num_threads) threads that
// run at the same time), for use outside TensorFlow.
ParallelFor StdThreadParallelFor(int num_threads);

struct SolverState {
  double* duals = nullptr;          // [num_examples], read and updated
  double* primal_losses = nullptr;  // [num_examples] out: s_i phi_i(x_i.w)
                                    // at the example's last visit
  double* dual_losses = nullptr;    // [num_examples] out: s_i phi_i*(-a_i)
  double* delta = nullptr;          // [num_slots] out: change of the
                                    // unshrunk weights
  // Out: empty, or why the solve stopped applying steps: the first example
  // (in shard order) whose step gave a dual that is not finite in float32,
  // with the loss, the inputs of its step and the result. The duals and
  // delta then hold the steps before it and must not be used.
  std::string error;
};

// `w0` are the unshrunk weights of the batch's slots (length num_slots).
void Solve(const SolverOptions& options, const ExamplesView& examples,
           const double* w0, int64_t num_slots, SolverState* state);

// Soft thresholding used for L1: sign(w) max(|w| - l1 / l2, 0).
inline double ShrinkL1(double w, double shrinkage) {
  if (w > shrinkage) return w - shrinkage;
  if (w < -shrinkage) return w + shrinkage;
  return 0.0;
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_SOLVER_H_
