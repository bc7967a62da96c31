#include "kernels/core/solver.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include "kernels/core/random.h"

namespace tf_sdca {

bool ParseVisitOrder(const char* name, VisitOrder* order) {
  const std::string s(name);
  if (s == "permutation") {
    *order = VisitOrder::kPermutation;
  } else if (s == "uniform") {
    *order = VisitOrder::kUniform;
  } else if (s == "cyclic") {
    *order = VisitOrder::kCyclic;
  } else if (s == "adaptive") {
    *order = VisitOrder::kAdaptive;
  } else {
    return false;
  }
  return true;
}

ParallelFor StdThreadParallelFor(int num_threads) {
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

namespace {

// One shard's solve: examples [begin, end) against its private weights.
template <bool kHasL1, bool kHasValues>
class ShardSolver {
 public:
  ShardSolver(const SolverOptions& options, const ExamplesView& examples,
              const double* w0, int64_t num_slots, double sigma)
      : options_(options),
        ex_(examples),
        w0_(w0),
        sigma_(sigma),
        shrinkage_(options.l1 / options.l2),
        local_(w0, w0 + num_slots) {}

  // Weight actually used in predictions.
  double Effective(double w) const {
    return kHasL1 ? ShrinkL1(w, shrinkage_) : w;
  }

  double Value(int64_t k) const { return kHasValues ? ex_.values[k] : 1.0; }

  // x_i . shrink(w) for w = local_ (current) or w0_ (nominal).
  double Dot(int64_t i, const double* w) const {
    double wx = 0.0;
    for (int64_t k = ex_.row_ptr[i]; k < ex_.row_ptr[i + 1]; ++k) {
      wx += Value(k) * Effective(w[ex_.slots[k]]);
    }
    for (const DenseBlock& block : ex_.dense) {
      const float* row = block.data + i * block.dim;
      const double* wb = w + block.slot_offset;
      for (int64_t d = 0; d < block.dim; ++d) wx += row[d] * Effective(wb[d]);
    }
    return wx;
  }

  void Axpy(int64_t i, double coef) {
    double* w = local_.data();
    for (int64_t k = ex_.row_ptr[i]; k < ex_.row_ptr[i + 1]; ++k) {
      w[ex_.slots[k]] += coef * Value(k);
    }
    for (const DenseBlock& block : ex_.dense) {
      const float* row = block.data + i * block.dim;
      double* wb = w + block.slot_offset;
      for (int64_t d = 0; d < block.dim; ++d) wb[d] += coef * row[d];
    }
  }

  void Step(int64_t i, double* duals) {
    const double s = ex_.weights[i];
    if (s <= 0.0) return;
    const double wx = Dot(i, local_.data());
    const double q = sigma_ * s * ex_.squared_norms[i] / options_.l2;
    const double dual = duals[i];
    const double new_dual =
        options_.loss->ComputeUpdatedDual(ex_.labels[i], dual, wx, q);
    const double change = new_dual - dual;
    if (change == 0.0) return;
    duals[i] = new_dual;
    Axpy(i, sigma_ * s * change / options_.l2);
  }

  // Fills `order` with the examples to visit in `pass`.
  void MakeOrder(int64_t begin, int64_t end, int pass, int64_t shard,
                 const double* duals, std::vector<int64_t>* order) {
    const int64_t n = end - begin;
    order->resize(n);
    Rng rng(MixSeed(options_.seed, static_cast<uint64_t>(shard),
                    static_cast<uint64_t>(pass)));
    switch (options_.order) {
      case VisitOrder::kCyclic:
        std::iota(order->begin(), order->end(), begin);
        break;
      case VisitOrder::kPermutation:
        std::iota(order->begin(), order->end(), begin);
        for (int64_t k = n - 1; k > 0; --k) {
          std::swap((*order)[k], (*order)[rng.Below(k + 1)]);
        }
        break;
      case VisitOrder::kUniform:
        for (int64_t k = 0; k < n; ++k) (*order)[k] = begin + rng.Below(n);
        break;
      case VisitOrder::kAdaptive:
        AdaptiveOrder(begin, end, duals, &rng, order);
        break;
    }
  }

  // Importance sampling with probabilities proportional to the example's
  // dual residual |alpha_i + phi'(w.x_i)| scaled by its weight and norm
  // (Csiba, Qu and Richtarik, "SDCA with adaptive probabilities", 2015),
  // mixed half and half with uniform so that every example keeps a positive
  // probability.
  void AdaptiveOrder(int64_t begin, int64_t end, const double* duals, Rng* rng,
                     std::vector<int64_t>* order) {
    const int64_t n = end - begin;
    std::vector<double> cumulative(n);
    double total = 0.0;
    const double gamma = options_.loss->DualStrongConvexity();
    for (int64_t i = begin; i < end; ++i) {
      const double s = ex_.weights[i];
      double p = 0.0;
      if (s > 0.0) {
        const double wx = Dot(i, local_.data());
        const double kappa =
            duals[i] + options_.loss->PrimalLossDerivative(wx, ex_.labels[i]);
        p = s * std::sqrt(ex_.squared_norms[i] + options_.l2 * gamma) *
            std::fabs(kappa);
        if (!std::isfinite(p)) p = 0.0;
      }
      total += p;
      cumulative[i - begin] = p;
    }
    const double uniform = total > 0.0 ? total / n : 1.0;
    double running = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      running += 0.5 * cumulative[k] + 0.5 * uniform;
      cumulative[k] = running;
    }
    for (int64_t k = 0; k < n; ++k) {
      const double u = rng->Uniform() * running;
      const int64_t pick =
          std::upper_bound(cumulative.begin(), cumulative.end(), u) -
          cumulative.begin();
      (*order)[k] = begin + std::min(pick, n - 1);
    }
  }

  void Run(int64_t shard, int64_t begin, int64_t end, SolverState* state) {
    // Primal losses at the weights the batch came with (like TensorFlow's
    // prev_wx); they are one half of the approximate duality gap.
    for (int64_t i = begin; i < end; ++i) {
      const double s = ex_.weights[i];
      state->primal_losses[i] =
          s > 0.0 ? s * options_.loss->PrimalLoss(Dot(i, w0_), ex_.labels[i])
                  : 0.0;
    }
    std::vector<int64_t> order;
    for (int pass = 0; pass < options_.num_inner_iterations; ++pass) {
      MakeOrder(begin, end, pass, shard, state->duals, &order);
      for (const int64_t i : order) Step(i, state->duals);
    }
    for (int64_t i = begin; i < end; ++i) {
      const double s = ex_.weights[i];
      state->dual_losses[i] =
          s > 0.0 ? s * options_.loss->DualLoss(state->duals[i], ex_.labels[i])
                  : 0.0;
    }
  }

  std::vector<double> TakeLocal() { return std::move(local_); }

 private:
  const SolverOptions& options_;
  const ExamplesView& ex_;
  const double* w0_;
  const double sigma_;
  const double shrinkage_;
  std::vector<double> local_;
};

template <bool kHasL1, bool kHasValues>
void SolveImpl(const SolverOptions& options, const ExamplesView& examples,
               const double* w0, int64_t num_slots, SolverState* state,
               const ParallelFor& parallel_for) {
  const int64_t n = examples.num_examples;
  const int64_t shards = std::max<int64_t>(
      1, std::min<int64_t>(options.num_shards, n));
  const double sigma =
      static_cast<double>(options.num_loss_partitions) * shards;
  std::vector<std::vector<double>> locals(shards);
  parallel_for(shards, [&](int64_t shard) {
    const int64_t begin = n * shard / shards;
    const int64_t end = n * (shard + 1) / shards;
    ShardSolver<kHasL1, kHasValues> solver(options, examples, w0, num_slots,
                                           sigma);
    solver.Run(shard, begin, end, state);
    locals[shard] = solver.TakeLocal();
  });
  // delta = sum over shards of (local - w0) / sigma', in shard order so the
  // sum is deterministic; split over slot ranges for parallelism.
  const int64_t chunks = std::min<int64_t>(shards, std::max<int64_t>(
      1, num_slots / 65536));
  parallel_for(chunks, [&](int64_t c) {
    const int64_t lo = num_slots * c / chunks;
    const int64_t hi = num_slots * (c + 1) / chunks;
    for (int64_t j = lo; j < hi; ++j) {
      double sum = 0.0;
      for (int64_t t = 0; t < shards; ++t) sum += locals[t][j] - w0[j];
      state->delta[j] = sum / sigma;
    }
  });
}

}  // namespace

void Solve(const SolverOptions& options, const ExamplesView& examples,
           const double* w0, int64_t num_slots, SolverState* state,
           const ParallelFor& parallel_for) {
  const bool has_l1 = options.l1 > 0.0;
  const bool has_values = examples.values != nullptr;
  if (has_l1) {
    if (has_values) {
      SolveImpl<true, true>(options, examples, w0, num_slots, state,
                            parallel_for);
    } else {
      SolveImpl<true, false>(options, examples, w0, num_slots, state,
                             parallel_for);
    }
  } else if (has_values) {
    SolveImpl<false, true>(options, examples, w0, num_slots, state,
                           parallel_for);
  } else {
    SolveImpl<false, false>(options, examples, w0, num_slots, state,
                            parallel_for);
  }
}

}  // namespace tf_sdca
