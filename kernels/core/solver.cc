#include "kernels/core/solver.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
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

// The per-example arrays one pass reads and writes: either the batch itself
// (indexed by example) or a packed copy in visiting order.
struct Rows {
  const int64_t* row_ptr = nullptr;
  const uint32_t* slots = nullptr;
  const float* values = nullptr;
  std::vector<DenseBlock> dense;
  const double* labels = nullptr;
  const float* weights = nullptr;
  const double* squared_norms = nullptr;
  double* duals = nullptr;
  double* primal_losses = nullptr;
};

// The batch's rows copied in the order of one pass. Visiting rows in a random
// order makes every row a cache (and TLB) miss inside a loop whose long
// dependency chains (the dual step) leave no room to overlap them; the copy
// loop has independent loads that overlap freely, and the pass then streams
// through memory. Measured: random permutation 4-5x slower than row order
// for the squared loss before packing.
class PackedRows {
 public:
  void Pack(const ExamplesView& ex, const SolverState& state,
            const std::vector<int64_t>& order) {
    const int64_t n = static_cast<int64_t>(order.size());
    row_ptr_.resize(n + 1);
    row_ptr_[0] = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = order[k];
      row_ptr_[k + 1] = row_ptr_[k] + (ex.row_ptr[i + 1] - ex.row_ptr[i]);
    }
    slots_.resize(row_ptr_[n]);
    if (ex.values != nullptr) values_.resize(row_ptr_[n]);
    int64_t dense_dim = 0;
    for (const DenseBlock& block : ex.dense) dense_dim += block.dim;
    dense_.resize(n * dense_dim);
    labels_.resize(n);
    weights_.resize(n);
    squared_norms_.resize(n);
    duals_.resize(n);
    primal_losses_.resize(n);
    constexpr int64_t kAhead = 8;  // rows in flight
    for (int64_t k = 0; k < n; ++k) {
      if (k + kAhead < n) {
        const int64_t j = order[k + kAhead];
        __builtin_prefetch(ex.slots + ex.row_ptr[j]);
        __builtin_prefetch(ex.slots + ex.row_ptr[j + 1] - 1);
        if (ex.values != nullptr) __builtin_prefetch(ex.values + ex.row_ptr[j]);
        for (const DenseBlock& block : ex.dense) {
          __builtin_prefetch(block.data + j * block.dim);
          __builtin_prefetch(block.data + (j + 1) * block.dim - 1);
        }
        __builtin_prefetch(ex.labels + j);
        __builtin_prefetch(ex.weights + j);
        __builtin_prefetch(ex.squared_norms + j);
        __builtin_prefetch(state.duals + j);
      }
      if (k + 2 * kAhead < n) __builtin_prefetch(ex.row_ptr + order[k + 2 * kAhead]);
      const int64_t i = order[k];
      const int64_t from = ex.row_ptr[i], to = row_ptr_[k];
      const int64_t len = ex.row_ptr[i + 1] - from;
      std::memcpy(slots_.data() + to, ex.slots + from, len * sizeof(uint32_t));
      if (ex.values != nullptr) {
        std::memcpy(values_.data() + to, ex.values + from, len * sizeof(float));
      }
      float* dst = dense_.data() + k * dense_dim;
      for (const DenseBlock& block : ex.dense) {
        std::memcpy(dst, block.data + i * block.dim, block.dim * sizeof(float));
        dst += block.dim;
      }
      labels_[k] = ex.labels[i];
      weights_[k] = ex.weights[i];
      squared_norms_[k] = ex.squared_norms[i];
      duals_[k] = state.duals[i];
      primal_losses_[k] = std::numeric_limits<double>::quiet_NaN();
    }
    rows_.row_ptr = row_ptr_.data();
    rows_.slots = slots_.data();
    rows_.values = ex.values != nullptr ? values_.data() : nullptr;
    // Dense groups are interleaved per row: block b of row k starts at
    // k * dense_dim + (sum of the previous blocks' dims), which the
    // DenseBlock form (data + k * dim) expresses with a "dim" stride of
    // dense_dim only for a single block; so merge all blocks into one.
    rows_.dense.clear();
    if (dense_dim > 0) {
      rows_.dense.push_back(DenseBlock{dense_.data(), dense_dim, -1});
    }
    rows_.labels = labels_.data();
    rows_.weights = weights_.data();
    rows_.squared_norms = squared_norms_.data();
    rows_.duals = duals_.data();
    rows_.primal_losses = primal_losses_.data();
  }

  // Writes the pass's results back to the batch's arrays.
  void Unpack(const std::vector<int64_t>& order, SolverState* state) const {
    for (size_t k = 0; k < order.size(); ++k) {
      state->duals[order[k]] = duals_[k];
      state->primal_losses[order[k]] = primal_losses_[k];
    }
  }

  const Rows& rows() const { return rows_; }

 private:
  std::vector<int64_t> row_ptr_;
  std::vector<uint32_t> slots_;
  std::vector<float> values_;
  std::vector<float> dense_;
  std::vector<double> labels_, squared_norms_, duals_, primal_losses_;
  std::vector<float> weights_;
  Rows rows_;
};

// The solve of one batch against a copy of its weights.
template <bool kHasL1, bool kHasValues>
class BatchSolver {
 public:
  BatchSolver(const SolverOptions& options, const ExamplesView& examples,
              const double* w0, int64_t num_slots, double sigma)
      : options_(options),
        ex_(examples),
        sigma_(sigma),
        shrinkage_(options.l1 / options.l2),
        local_(w0, w0 + num_slots) {
    // Offsets of the dense blocks when they are packed side by side.
    int64_t offset = 0;
    for (const DenseBlock& block : examples.dense) {
      packed_dense_.push_back(DenseBlock{nullptr, block.dim, block.slot_offset});
      packed_dense_offsets_.push_back(offset);
      offset += block.dim;
    }
  }

  // Weight actually used in predictions.
  double Effective(double w) const {
    return kHasL1 ? ShrinkL1(w, shrinkage_) : w;
  }

  // Iterates over example i's dense features as (weight slot, value) runs:
  // fn(const float* row, const DenseBlock& block).
  template <typename Fn>
  void ForDense(const Rows& r, int64_t i, const Fn& fn) const {
    if (r.dense.size() == 1 && r.dense[0].slot_offset < 0) {  // packed
      const float* row = r.dense[0].data + i * r.dense[0].dim;
      for (size_t b = 0; b < packed_dense_.size(); ++b) {
        fn(row + packed_dense_offsets_[b], packed_dense_[b]);
      }
      return;
    }
    for (const DenseBlock& block : r.dense) {
      fn(block.data + i * block.dim, block);
    }
  }

  // x_i . shrink(w). Local restrict pointers and two partial sums keep the
  // accumulators in registers (member pointers may alias and force spills).
  double Dot(const Rows& r, int64_t i, const double* __restrict w) const {
    const uint32_t* __restrict slots = r.slots;
    const float* __restrict values = r.values;
    const int64_t begin = r.row_ptr[i], end = r.row_ptr[i + 1];
    double s0 = 0.0, s1 = 0.0;
    int64_t k = begin;
    for (; k + 1 < end; k += 2) {
      s0 += (kHasValues ? values[k] : 1.0) * Effective(w[slots[k]]);
      s1 += (kHasValues ? values[k + 1] : 1.0) * Effective(w[slots[k + 1]]);
    }
    if (k < end) s0 += (kHasValues ? values[k] : 1.0) * Effective(w[slots[k]]);
    ForDense(r, i, [&](const float* __restrict row, const DenseBlock& block) {
      const double* __restrict wb = w + block.slot_offset;
      const int64_t dim = block.dim;
      int64_t d = 0;
      for (; d + 1 < dim; d += 2) {
        s0 += row[d] * Effective(wb[d]);
        s1 += row[d + 1] * Effective(wb[d + 1]);
      }
      if (d < dim) s0 += row[d] * Effective(wb[d]);
    });
    return s0 + s1;
  }

  void Axpy(const Rows& r, int64_t i, double coef) {
    double* __restrict w = local_.data();
    const uint32_t* __restrict slots = r.slots;
    const float* __restrict values = r.values;
    const int64_t begin = r.row_ptr[i], end = r.row_ptr[i + 1];
    // Slots inside one row are distinct (duplicates were merged), so these
    // read-modify-writes are independent.
    for (int64_t k = begin; k < end; ++k) {
      w[slots[k]] += coef * (kHasValues ? values[k] : 1.0);
    }
    ForDense(r, i, [&](const float* __restrict row, const DenseBlock& block) {
      double* __restrict wb = w + block.slot_offset;
      const int64_t dim = block.dim;
      for (int64_t d = 0; d < dim; ++d) wb[d] += coef * row[d];
    });
  }

  void PrefetchWeights(const Rows& r, int64_t i) const {
    const double* w = local_.data();
    for (int64_t k = r.row_ptr[i]; k < r.row_ptr[i + 1]; ++k) {
      __builtin_prefetch(w + r.slots[k], 1);
    }
  }

  // One coordinate step on row i of `r`, example `example` of the batch.
  // Also records the example's primal loss at the weights it was visited
  // with (one half of the duality gap).
  void Step(const Rows& r, int64_t i, int64_t example) {
    const double s = r.weights[i];
    if (s <= 0.0 || !error_.empty()) return;
    const double wx = Dot(r, i, local_.data());
    r.primal_losses[i] = s * options_.loss->PrimalLoss(wx, r.labels[i]);
    const double q = sigma_ * s * r.squared_norms[i] / options_.l2;
    const double dual = r.duals[i];
    const double exact =
        options_.loss->ComputeUpdatedDual(r.labels[i], dual, wx, q);
    // The state stores duals as float32: round here so that the weights
    // stay exactly the function w(alpha) of the duals that are stored.
    const double new_dual = static_cast<float>(exact);
    const double coef = sigma_ * s * (new_dual - dual) / options_.l2;
    // The losses' steps are finite for finite inputs; only an exact dual
    // beyond float32 (e.g. Poisson with a tiny |x|^2 / l2 and a huge
    // margin) or a weight change beyond float64 gets here. Stop rather
    // than write it: the kernel reports the error.
    if (!std::isfinite(new_dual) || !std::isfinite(coef)) {
      RecordError(example, r.labels[i], dual, wx, q, exact);
      return;
    }
    if (coef == 0.0) return;
    r.duals[i] = new_dual;
    Axpy(r, i, coef);
  }

  // Empty, or the first failed step.
  const std::string& error() const { return error_; }

  // Fills `order` with the examples to visit in `pass`.
  // `stream` 0 keeps the draws of the sharded solver this replaced.
  void MakeOrder(int64_t begin, int64_t end, int pass, int64_t stream,
                 const double* duals, std::vector<int64_t>* order) {
    const int64_t n = end - begin;
    order->resize(n);
    Rng rng(MixSeed(options_.seed, static_cast<uint64_t>(stream),
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
        const double wx = Dot(batch_rows_, i, local_.data());
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

  // The solve: Begin, then per pass StartPass, RunPass, EndPass; then
  // Finish.
  void Begin(SolverState* state) {
    end_ = ex_.num_examples;
    state_ = state;
    batch_rows_.row_ptr = ex_.row_ptr;
    batch_rows_.slots = ex_.slots;
    batch_rows_.values = ex_.values;
    batch_rows_.dense = ex_.dense;
    batch_rows_.labels = ex_.labels;
    batch_rows_.weights = ex_.weights;
    batch_rows_.squared_norms = ex_.squared_norms;
    batch_rows_.duals = state->duals;
    batch_rows_.primal_losses = state->primal_losses;
    // Examples that no pass visits (possible with sampling orders) get their
    // primal loss at the end; NaN marks "not visited yet".
    for (int64_t i = 0; i < end_; ++i) {
      state->primal_losses[i] = std::numeric_limits<double>::quiet_NaN();
    }
  }

  void StartPass(int pass) {
    MakeOrder(0, end_, pass, /*stream=*/0, state_->duals, &order_);
    packed_pass_ = options_.order == VisitOrder::kPermutation;
    // Each example once: solve on a packed copy, in row order.
    if (packed_pass_) packed_.Pack(ex_, *state_, order_);
  }

  // The steps of the current pass.
  void RunPass() {
    const int64_t count = static_cast<int64_t>(order_.size());
    const Rows& r = packed_pass_ ? packed_.rows() : batch_rows_;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t i = packed_pass_ ? k : order_[k];
      if (k + 1 < count) {
        PrefetchWeights(r, packed_pass_ ? k + 1 : order_[k + 1]);
      }
      Step(r, i, order_[k]);
    }
  }

  void EndPass() {
    if (packed_pass_) packed_.Unpack(order_, state_);
  }

  void Finish() {
    for (int64_t i = 0; i < end_; ++i) {
      const double s = ex_.weights[i];
      double* primal = state_->primal_losses;
      if (s <= 0.0) {
        primal[i] = 0.0;
        state_->dual_losses[i] = 0.0;
        continue;
      }
      if (std::isnan(primal[i])) {
        primal[i] = s * options_.loss->PrimalLoss(
                            Dot(batch_rows_, i, local_.data()), ex_.labels[i]);
      }
      state_->dual_losses[i] =
          s * options_.loss->DualLoss(state_->duals[i], ex_.labels[i]);
    }
  }

  const std::vector<double>& local() const { return local_; }


 private:
  void RecordError(int64_t example, double label, double dual, double wx,
                   double q, double exact) {
    std::ostringstream out;
    out.precision(17);
    out << options_.loss->Name() << ": the dual step of example " << example
        << " (label " << label << " as the loss uses it, dual " << dual
        << ", margin w.x = " << wx << ", q = s |x|^2 / l2 = " << q
        << ") gives the dual " << exact
        << ", which float32 state cannot hold or whose weight change "
           "overflows; rescale the features or raise l2";
    error_ = out.str();
  }

 private:
  const SolverOptions& options_;
  const ExamplesView& ex_;
  const double sigma_;
  const double shrinkage_;
  std::vector<double> local_;
  Rows batch_rows_;
  int64_t end_ = 0;
  SolverState* state_ = nullptr;
  std::vector<int64_t> order_;
  PackedRows packed_;
  bool packed_pass_ = false;
  std::vector<DenseBlock> packed_dense_;
  std::vector<int64_t> packed_dense_offsets_;
  std::string error_;
};

template <bool kHasL1, bool kHasValues>
void SolveImpl(const SolverOptions& options, const ExamplesView& examples,
               const double* w0, int64_t num_slots, SolverState* state) {
  const double partitions = static_cast<double>(options.num_loss_partitions);
  BatchSolver<kHasL1, kHasValues> solver(options, examples, w0, num_slots,
                                         partitions);
  solver.Begin(state);
  for (int pass = 0; pass < options.num_inner_iterations; ++pass) {
    solver.StartPass(pass);
    solver.RunPass();
    solver.EndPass();
  }
  solver.Finish();
  if (!solver.error().empty()) {
    state->error = solver.error();
    return;
  }
  // This machine's change of the weights (CoCoA+: the local solve's change
  // over K), for the caller to add up.
  const std::vector<double>& local = solver.local();
  for (int64_t j = 0; j < num_slots; ++j) {
    state->delta[j] = (local[j] - w0[j]) / partitions;
  }
}

}  // namespace

void Solve(const SolverOptions& options, const ExamplesView& examples,
           const double* w0, int64_t num_slots, SolverState* state) {
  const bool has_l1 = options.l1 > 0.0;
  const bool has_values = examples.values != nullptr;
  if (has_l1) {
    if (has_values) {
      SolveImpl<true, true>(options, examples, w0, num_slots, state);
    } else {
      SolveImpl<true, false>(options, examples, w0, num_slots, state);
    }
  } else if (has_values) {
    SolveImpl<false, true>(options, examples, w0, num_slots, state);
  } else {
    SolveImpl<false, false>(options, examples, w0, num_slots, state);
  }
}

}  // namespace tf_sdca
