#include "kernels/core/resident.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <utility>
#include <vector>

#include "kernels/core/absolute_loss.h"
#include "kernels/core/hinge_loss.h"
#include "kernels/core/logistic_loss.h"
#include "kernels/core/poisson_loss.h"
#include "kernels/core/random.h"
#include "kernels/core/smooth_hinge_loss.h"
#include "kernels/core/squared_loss.h"

namespace tf_sdca {

namespace {

template <typename T>
std::string Describe(const char* name, int64_t at, T value, const char* why) {
  std::ostringstream out;
  out << name << "[" << at << "] = " << value << " " << why;
  return out.str();
}

// Sum of squares of one row's sparse part, merging repeated ids (a repeated
// id means the sum of its values). Rows with strictly increasing ids, the
// common case, need no merging.
double SparseSquaredNorm(const ResidentData& d, int64_t i) {
  const int64_t begin = d.row_ptr[i], end = d.row_ptr[i + 1];
  bool increasing = true;
  for (int64_t k = begin + 1; k < end; ++k) {
    if (d.ids[k] <= d.ids[k - 1]) {
      increasing = false;
      break;
    }
  }
  if (increasing) {
    if (d.values == nullptr) return static_cast<double>(end - begin);
    double sq = 0.0;
    for (int64_t k = begin; k < end; ++k) {
      sq += static_cast<double>(d.values[k]) * d.values[k];
    }
    return sq;
  }
  std::vector<std::pair<int32_t, double>> row;
  row.reserve(end - begin);
  for (int64_t k = begin; k < end; ++k) {
    row.emplace_back(d.ids[k], d.values == nullptr ? 1.0 : d.values[k]);
  }
  std::sort(row.begin(), row.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  double sq = 0.0, run = 0.0;
  for (size_t k = 0; k < row.size(); ++k) {
    if (k > 0 && row[k].first != row[k - 1].first) {
      sq += run * run;
      run = 0.0;
    }
    run += row[k].second;
  }
  return sq + run * run;
}

// The hot loop of one pass, specialised for the loss (no virtual calls),
// for L1 and for explicit sparse values.
template <class Loss, bool kHasL1, bool kHasValues>
class FastPass {
 public:
  FastPass(const Loss& loss, const SolverOptions& options,
           const ResidentData& data, double sigma)
      : loss_(loss),
        d_(data),
        sigma_(sigma),
        inv_l2_(1.0 / options.l2),
        shrinkage_(options.l1 / options.l2) {}

  double Effective(double w) const {
    return kHasL1 ? ShrinkL1(w, shrinkage_) : w;
  }

  // Visits rows order[0..n) (or 0..n when order is nullptr).
  void Run(const int64_t* order, int64_t count, double* __restrict w,
           double* __restrict duals) const {
    const int64_t* __restrict row_ptr = d_.row_ptr;
    const int32_t* __restrict ids = d_.ids;
    const float* __restrict values = d_.values;
    const float* __restrict dense = d_.dense;
    const int64_t dd = d_.dense_dim;
    double* __restrict wd = w + d_.num_sparse_features;
    const bool sparse = row_ptr != nullptr;
    // Prefetch distances, in rows: a row's own data (ids, dense part,
    // scalars) is fetched kRowAhead rows before its visit, its weights
    // kWeightAhead rows before (by then its ids are in cache).
    constexpr int64_t kRowAhead = 8, kWeightAhead = 3;
    auto row_of = [order](int64_t k) { return order ? order[k] : k; };
    for (int64_t k = 0; k < count; ++k) {
      if (k + 2 * kRowAhead < count && sparse) {
        __builtin_prefetch(row_ptr + row_of(k + 2 * kRowAhead));
      }
      if (k + kRowAhead < count) {
        const int64_t j = row_of(k + kRowAhead);
        if (sparse) {
          __builtin_prefetch(ids + row_ptr[j]);
          __builtin_prefetch(ids + row_ptr[j + 1] - 1);
          if (kHasValues) {
            __builtin_prefetch(values + row_ptr[j]);
            __builtin_prefetch(values + row_ptr[j + 1] - 1);
          }
        }
        if (dd > 0) {
          __builtin_prefetch(dense + j * dd);
          __builtin_prefetch(dense + (j + 1) * dd - 1);
        }
        __builtin_prefetch(d_.labels + j);
        __builtin_prefetch(d_.example_weights + j);
        __builtin_prefetch(d_.squared_norms + j);
        __builtin_prefetch(duals + j, 1);
      }
      if (k + kWeightAhead < count && sparse) {
        const int64_t j = row_of(k + kWeightAhead);
        for (int64_t e = row_ptr[j]; e < row_ptr[j + 1]; ++e) {
          __builtin_prefetch(w + ids[e], 1);
        }
      }
      const int64_t i = row_of(k);
      const double s = d_.example_weights[i];
      if (s <= 0.0) continue;
      const int64_t begin = sparse ? row_ptr[i] : 0;
      const int64_t end = sparse ? row_ptr[i + 1] : 0;
      const float* __restrict x = dense + i * dd;
      // Four partial sums break the add chain.
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
      int64_t e = begin;
      for (; e + 3 < end; e += 4) {
        s0 += (kHasValues ? values[e] : 1.0) * Effective(w[ids[e]]);
        s1 += (kHasValues ? values[e + 1] : 1.0) * Effective(w[ids[e + 1]]);
        s2 += (kHasValues ? values[e + 2] : 1.0) * Effective(w[ids[e + 2]]);
        s3 += (kHasValues ? values[e + 3] : 1.0) * Effective(w[ids[e + 3]]);
      }
      for (; e < end; ++e) {
        s0 += (kHasValues ? values[e] : 1.0) * Effective(w[ids[e]]);
      }
      int64_t c = 0;
      for (; c + 3 < dd; c += 4) {
        s0 += x[c] * Effective(wd[c]);
        s1 += x[c + 1] * Effective(wd[c + 1]);
        s2 += x[c + 2] * Effective(wd[c + 2]);
        s3 += x[c + 3] * Effective(wd[c + 3]);
      }
      for (; c < dd; ++c) s0 += x[c] * Effective(wd[c]);
      const double wx = (s0 + s1) + (s2 + s3);
      const double q = sigma_ * s * d_.squared_norms[i] * inv_l2_;
      const double dual = duals[i];
      const double new_dual =
          loss_.Loss::ComputeUpdatedDual(d_.labels[i], dual, wx, q);
      const double change = new_dual - dual;
      if (change == 0.0) continue;
      duals[i] = new_dual;
      const double coef = sigma_ * s * change * inv_l2_;
      // Repeated ids in a row are added twice, which is what their summed
      // value means.
      for (e = begin; e < end; ++e) {
        w[ids[e]] += coef * (kHasValues ? values[e] : 1.0);
      }
      for (c = 0; c < dd; ++c) wd[c] += coef * x[c];
    }
  }

 private:
  const Loss& loss_;
  const ResidentData& d_;
  const double sigma_;
  const double inv_l2_;
  const double shrinkage_;
};

template <class Loss>
void RunFastPass(const Loss& loss, const SolverOptions& options,
                 const ResidentData& data, double sigma,
                 const int64_t* order, int64_t count, double* w,
                 double* duals) {
  const bool l1 = options.l1 > 0.0;
  const bool values = data.values != nullptr;
  if (l1 && values) {
    FastPass<Loss, true, true>(loss, options, data, sigma)
        .Run(order, count, w, duals);
  } else if (l1) {
    FastPass<Loss, true, false>(loss, options, data, sigma)
        .Run(order, count, w, duals);
  } else if (values) {
    FastPass<Loss, false, true>(loss, options, data, sigma)
        .Run(order, count, w, duals);
  } else {
    FastPass<Loss, false, false>(loss, options, data, sigma)
        .Run(order, count, w, duals);
  }
}

// Dispatches on the loss's concrete type (by name: no RTTI needed).
void DispatchPass(const SolverOptions& options, const ResidentData& data,
                  double sigma, const int64_t* order, int64_t count, double* w,
                  double* duals) {
  const DualLossUpdater* loss = options.loss;
  const std::string name = loss->Name();
#define TF_SDCA_PASS(NAME, TYPE)                                           \
  if (name == NAME) {                                                      \
    return RunFastPass(static_cast<const TYPE&>(*loss), options, data,     \
                       sigma, order, count, w, duals);                     \
  }
  TF_SDCA_PASS("logistic_loss", LogisticLossUpdater)
  TF_SDCA_PASS("squared_loss", SquaredLossUpdater)
  TF_SDCA_PASS("hinge_loss", HingeLossUpdater)
  TF_SDCA_PASS("smooth_hinge_loss", SmoothHingeLossUpdater)
  TF_SDCA_PASS("absolute_loss", AbsoluteLossUpdater)
  TF_SDCA_PASS("poisson_loss", PoissonLossUpdater)
#undef TF_SDCA_PASS
}

// The order of one pass: nullptr for rows in order (cyclic), else fills
// `order`.
const int64_t* PassOrder(const SolverOptions& options, int64_t n, int pass,
                         std::vector<int64_t>* order) {
  if (options.order == VisitOrder::kCyclic) return nullptr;
  Rng rng(MixSeed(options.seed, 0, static_cast<uint64_t>(pass)));
  order->resize(n);
  if (options.order == VisitOrder::kUniform) {
    for (int64_t k = 0; k < n; ++k) (*order)[k] = rng.Below(n);
  } else {
    std::iota(order->begin(), order->end(), 0);
    for (int64_t k = n - 1; k > 0; --k) {
      std::swap((*order)[k], (*order)[rng.Below(k + 1)]);
    }
  }
  return order->data();
}

// Sharded or adaptive solving goes through the batch solver, whose slots
// are here the full weight table.
void SolveThroughBatchSolver(const SolverOptions& options,
                             const ResidentData& data, double* weights,
                             double* duals, const ParallelFor& parallel_for) {
  const int64_t n = data.num_examples;
  const int64_t m = data.num_slots();
  ExamplesView view;
  view.num_examples = n;
  std::vector<int64_t> empty_rows;
  if (data.row_ptr != nullptr) {
    view.row_ptr = data.row_ptr;
  } else {
    empty_rows.assign(n + 1, 0);
    view.row_ptr = empty_rows.data();
  }
  // Ids are validated non-negative: as slots they are the same bits.
  view.slots = reinterpret_cast<const uint32_t*>(data.ids);
  view.values = data.values;
  if (data.dense_dim > 0) {
    view.dense.push_back(
        DenseBlock{data.dense, data.dense_dim, data.num_sparse_features});
  }
  view.labels = data.labels;
  view.weights = data.example_weights;
  view.squared_norms = data.squared_norms;
  std::vector<double> primal(n), dual_loss(n), delta(m);
  SolverState state;
  state.duals = duals;
  state.primal_losses = primal.data();
  state.dual_losses = dual_loss.data();
  state.delta = delta.data();
  std::vector<double> w0(weights, weights + m);
  Solve(options, view, w0.data(), m, &state, parallel_for);
  for (int64_t j = 0; j < m; ++j) weights[j] = w0[j] + delta[j];
}

}  // namespace

bool ValidateRowPtr(const ResidentData& d, int64_t num_ids,
                    std::string* error) {
  const int64_t n = d.num_examples;
  if (d.row_ptr == nullptr) return true;
  if (d.row_ptr[0] != 0) {
    *error = Describe("row_ptr", 0, d.row_ptr[0], "must be 0");
    return false;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (d.row_ptr[i + 1] < d.row_ptr[i]) {
      *error = Describe("row_ptr", i + 1, d.row_ptr[i + 1],
                        "is smaller than the entry before it");
      return false;
    }
  }
  if (d.row_ptr[n] != num_ids) {
    std::ostringstream out;
    out << "row_ptr[" << n << "] = " << d.row_ptr[n]
        << " must equal the number of feature_ids (" << num_ids << ")";
    *error = out.str();
    return false;
  }
  return true;
}

bool PrepareResidentRows(const ResidentData& d, int64_t begin, int64_t end,
                         double* norms, std::string* error) {
  if (d.row_ptr != nullptr) {
    const int64_t lo = d.row_ptr[begin], hi = d.row_ptr[end];
    for (int64_t k = lo; k < hi; ++k) {
      if (d.ids[k] < 0 || d.ids[k] >= d.num_sparse_features) {
        std::ostringstream out;
        out << "feature_ids[" << k << "] = " << d.ids[k] << " is outside [0, "
            << d.num_sparse_features << ") (the sparse rows of weights)";
        *error = out.str();
        return false;
      }
    }
    if (d.values != nullptr) {
      for (int64_t k = lo; k < hi; ++k) {
        if (!std::isfinite(d.values[k])) {
          *error = Describe("feature_values", k, d.values[k], "must be finite");
          return false;
        }
      }
    }
  }
  for (int64_t k = begin * d.dense_dim; k < end * d.dense_dim; ++k) {
    if (!std::isfinite(d.dense[k])) {
      std::ostringstream out;
      out << "dense_features[" << k / d.dense_dim << ", " << k % d.dense_dim
          << "] = " << d.dense[k] << " must be finite";
      *error = out.str();
      return false;
    }
  }
  for (int64_t i = begin; i < end; ++i) {
    double sq = d.row_ptr != nullptr ? SparseSquaredNorm(d, i) : 0.0;
    const float* x = d.dense + i * d.dense_dim;
    for (int64_t c = 0; c < d.dense_dim; ++c) {
      sq += static_cast<double>(x[c]) * x[c];
    }
    norms[i] = sq;
  }
  return true;
}

void SolveResident(const SolverOptions& options, const ResidentData& data,
                   double* weights, double* duals,
                   const ParallelFor& parallel_for) {
  if (data.num_examples == 0) return;
  if (options.num_shards > 1 || options.order == VisitOrder::kAdaptive) {
    SolveThroughBatchSolver(options, data, weights, duals, parallel_for);
    return;
  }
  const int64_t m = data.num_slots();
  const double partitions = static_cast<double>(options.num_loss_partitions);
  // CoCoA+: solve against w + K * (local change); hand back 1/K of it.
  std::vector<double> w0;
  if (options.num_loss_partitions > 1) w0.assign(weights, weights + m);
  std::vector<int64_t> order;
  for (int pass = 0; pass < options.num_inner_iterations; ++pass) {
    const int64_t* visit = PassOrder(options, data.num_examples, pass, &order);
    DispatchPass(options, data, partitions, visit, data.num_examples, weights,
                 duals);
  }
  if (options.num_loss_partitions > 1) {
    for (int64_t j = 0; j < m; ++j) {
      weights[j] = w0[j] + (weights[j] - w0[j]) / partitions;
    }
  }
}

ObjectiveParts EvaluateResident(const SolverOptions& options,
                                const ResidentData& d, const double* weights,
                                const double* duals, int64_t chunks,
                                const ParallelFor& parallel_for) {
  const int64_t n = d.num_examples;
  const int64_t m = d.num_slots();
  const double shrinkage = options.l1 / options.l2;
  std::vector<double> shrunk(m);
  ObjectiveParts parts;
  for (int64_t j = 0; j < m; ++j) {
    const double v = ShrinkL1(weights[j], shrinkage);
    shrunk[j] = v;
    parts.l2_norm_sq += v * v;
    parts.l1_norm += std::fabs(v);
  }
  chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, n / 4096 + 1));
  std::vector<double> primal(chunks, 0.0), dual(chunks, 0.0);
  const DualLossUpdater& loss = *options.loss;
  parallel_for(chunks, [&](int64_t c) {
    const double* w = shrunk.data();
    const double* wd = w + d.num_sparse_features;
    double p = 0.0, q = 0.0;
    for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i) {
      const double s = d.example_weights[i];
      if (s <= 0.0) continue;
      double wx = 0.0;
      if (d.row_ptr != nullptr) {
        for (int64_t e = d.row_ptr[i]; e < d.row_ptr[i + 1]; ++e) {
          wx += (d.values ? d.values[e] : 1.0) * w[d.ids[e]];
        }
      }
      const float* x = d.dense + i * d.dense_dim;
      for (int64_t k = 0; k < d.dense_dim; ++k) wx += x[k] * wd[k];
      p += s * loss.PrimalLoss(wx, d.labels[i]);
      q += s * loss.DualLoss(duals[i], d.labels[i]);
    }
    primal[c] = p;
    dual[c] = q;
  });
  for (int64_t c = 0; c < chunks; ++c) {
    parts.primal_loss += primal[c];
    parts.dual_loss += dual[c];
  }
  return parts;
}

}  // namespace tf_sdca
