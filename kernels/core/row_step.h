// What every pass over packed records shares: the coordinate step
// (RowStep), the weight table's plain and lock-free access, the prefetches
// ahead of a visit, the dispatch from a loss's name to its concrete type,
// and CoCoA+'s scaling of a call's change. Internal to the core: the
// one-thread passes (packed_rows.cc) and the lock-free threads'
// (packed_rows_threads.cc) compose them. They sit in two translation units
// so that the compiler takes them on two cores: the threads' passes,
// instantiated per loss, L1, values and lockstep, took two thirds of the
// core's build (54 of 80 s under AddressSanitizer, 11 of 17 s at -O3).
#ifndef TF_SDCA_KERNELS_CORE_ROW_STEP_H_
#define TF_SDCA_KERNELS_CORE_ROW_STEP_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/core/absolute_loss.h"
#include "kernels/core/hinge_loss.h"
#include "kernels/core/logistic_loss.h"
#include "kernels/core/poisson_loss.h"
#include "kernels/core/smooth_hinge_loss.h"
#include "kernels/core/solver_options.h"
#include "kernels/core/squared_loss.h"

namespace tf_sdca {
namespace row_step {

// Plain reads and writes of the weight table (one thread owns it).
struct PlainAccess {
  static double Load(const double* p) { return *p; }
  static void Add(double* p, double v) { *p += v; }
};

// Lock-free access to a weight table other threads update at the same time:
// relaxed atomic loads, and adds by compare-and-swap, so that no update is
// lost (the weights stay the exact sum of all the rows' changes).
struct SharedAccess {
  static double Load(const double* p) {
    double v;
    __atomic_load(p, &v, __ATOMIC_RELAXED);
    return v;
  }
  static void Add(double* p, double v) {
    double old = Load(p), updated;
    do {
      updated = old + v;
    } while (!__atomic_compare_exchange(p, &old, &updated, /*weak=*/true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  }
};

// The coordinate step of every solve, specialised for the loss (no virtual
// calls), for L1 and for explicit sparse values: the pass over packed
// records (PackedPass: the epoch ops and the mini-batch op) and the
// threaded pass over split records (SplitPass) compose it. A step is: the
// margin summed over the row's parts (AddSparse / AddDense, four partial
// sums to break the add chain), the dual update (Update), the weights'
// change (ApplySparse / ApplyDense). Its parts are forced inline: GCC 12
// left AddDense a call once the pass had a second (recording) variant, and
// an epoch took ~7% longer.
template <class Loss, bool kHasL1, bool kHasValues>
class RowStep {
 public:
  RowStep(const Loss& loss, const SolverOptions& options, double sigma)
      : loss_(loss),
        sigma_(sigma),
        inv_l2_(1.0 / options.l2),
        shrinkage_(options.l1 / options.l2) {}

  struct Sums {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    double Total() const { return (s0 + s1) + (s2 + s3); }
  };

  double Effective(double w) const {
    return kHasL1 ? ShrinkL1(w, shrinkage_) : w;
  }

  // Entry e's value: 1.0 for e < units (a one-thread record keeps no value
  // for its leading entries of value 1.0f, PackedRows::Entries), else
  // values[e].
  __attribute__((always_inline))
  static double Value(const float* __restrict values, int64_t units,
                      int64_t e) {
    if (!kHasValues) return 1.0;
    return e < units ? 1.0 : values[e];
  }

  // Adds sum_e values[e] * w[ids[e]] over e in [0, nnz) (Value).
  template <class Access>
  __attribute__((always_inline))
  void AddSparse(const int32_t* __restrict ids,
                 const float* __restrict values, int64_t nnz,
                 const double* w, Sums* sums, int64_t units = 0) const {
    auto term = [&](int64_t e) {
      return Value(values, units, e) * Effective(Access::Load(w + ids[e]));
    };
    int64_t e = 0;
    if (kHasValues) {
      // The groups of four units first: 1.0 * w is w, the same bits.
      auto unit = [&](int64_t e) {
        return Effective(Access::Load(w + ids[e]));
      };
      for (; e + 3 < nnz && e + 3 < units; e += 4) {
        sums->s0 += unit(e);
        sums->s1 += unit(e + 1);
        sums->s2 += unit(e + 2);
        sums->s3 += unit(e + 3);
      }
    }
    for (; e + 3 < nnz; e += 4) {
      sums->s0 += term(e);
      sums->s1 += term(e + 1);
      sums->s2 += term(e + 2);
      sums->s3 += term(e + 3);
    }
    for (; e < nnz; ++e) sums->s0 += term(e);
  }

  // Adds x[0, dd) . wd.
  __attribute__((always_inline))
  void AddDense(const float* __restrict x, int64_t dd,
                const double* __restrict wd, Sums* sums) const {
    int64_t c = 0;
    for (; c + 3 < dd; c += 4) {
      sums->s0 += x[c] * Effective(wd[c]);
      sums->s1 += x[c + 1] * Effective(wd[c + 1]);
      sums->s2 += x[c + 2] * Effective(wd[c + 2]);
      sums->s3 += x[c + 3] * Effective(wd[c + 3]);
    }
    for (; c < dd; ++c) sums->s0 += x[c] * Effective(wd[c]);
  }

  // q = sigma s |x|^2 / l2 of a row (the curvature of its dual step).
  double Q(double s, double norm) const { return sigma_ * s * norm * inv_l2_; }

  // The dual step of a row with margin wx (label converted, s its weight
  // > 0, norm |x|^2): updates *dual and returns the coefficient of x in the
  // weights' change (0.0: no change).
  //
  // kFloat32Duals (TfSdca>Optimizer, whose state holds float32 duals) rounds
  // the new dual to float32 before the weights move by it, so that they
  // stay exactly w(alpha) of the duals stored; a step whose rounded dual or
  // coefficient is not finite (an exact dual beyond float32, e.g. Poisson
  // with a tiny |x|^2 / l2 and a huge margin) then changes nothing and
  // returns NaN, for the caller to report. (Without it a non-finite step is
  // written and the epoch ops report it after the call, CheckEpochResult.)
  template <bool kFloat32Duals = false>
  __attribute__((always_inline))
  double Update(double label, double s, double norm, double wx,
                double* dual) const {
    const double q = Q(s, norm);
    const double old_dual = *dual;
    double new_dual = loss_.Loss::ComputeUpdatedDual(label, old_dual, wx, q);
    if (kFloat32Duals) new_dual = static_cast<float>(new_dual);
    const double change = new_dual - old_dual;
    if (change == 0.0) return 0.0;
    const double coef = sigma_ * s * change * inv_l2_;
    if (kFloat32Duals && !(std::isfinite(new_dual) && std::isfinite(coef))) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    *dual = new_dual;
    return coef;
  }

  // w[ids[e]] += coef * values[e]. Repeated ids in a row are added twice,
  // which is what their summed value means.
  template <class Access>
  __attribute__((always_inline))
  void ApplySparse(const int32_t* __restrict ids,
                   const float* __restrict values, int64_t nnz, double coef,
                   double* w, int64_t units = 0) const {
    int64_t e = 0;
    if (kHasValues) {
      for (; e < nnz && e < units; ++e) Access::Add(w + ids[e], coef);
    }
    for (; e < nnz; ++e) {
      Access::Add(w + ids[e], coef * Value(values, units, e));
    }
  }

  __attribute__((always_inline))
  void ApplyDense(const float* __restrict x, int64_t dd, double coef,
                  double* __restrict wd) const {
    for (int64_t c = 0; c < dd; ++c) wd[c] += coef * x[c];
  }

  // The whole step on a row with sparse entries ids/values[0, nnz) (the
  // first `units` of value 1.0) and dense part x[0, dd), one thread owning
  // the sparse weights w and the dense weights wd. Returns Update's
  // coefficient; *margin is the margin the step saw.
  template <bool kFloat32Duals = false>
  __attribute__((always_inline))
  double Take(const int32_t* __restrict ids, const float* __restrict values,
              int64_t units, int64_t nnz, const float* __restrict x,
              int64_t dd,
              double label, double s, double norm, double* dual,
              double* __restrict w, double* __restrict wd,
              double* margin) const {
    Sums sums;
    AddSparse<PlainAccess>(ids, values, nnz, w, &sums, units);
    AddDense(x, dd, wd, &sums);
    *margin = sums.Total();
    const double coef =
        Update<kFloat32Duals>(label, s, norm, *margin, dual);
    if (coef == 0.0 || (kFloat32Duals && std::isnan(coef))) return coef;
    ApplySparse<PlainAccess>(ids, values, nnz, coef, w, units);
    ApplyDense(x, dd, coef, wd);
    return coef;
  }

 private:
  const Loss& loss_;
  const double sigma_;
  const double inv_l2_;
  const double shrinkage_;
};

// Prefetches for visit k of the records at byte offsets visit[0, count):
// the first `lines` (>= 4) cache lines of the record kRowAhead visits ahead,
// and the weights of its first ids_of(header) ids and its dual kWeightAhead
// visits ahead (by then the record is in cache). Forced inline: as a call
// (GCC 12 -O3 does not inline it) an epoch took 2.5x the time.
//
// With `stride` K > 1 (the multiclass losses' [slots, K] table and [n, K]
// duals) each slot's and the dual block's first lines (up to 4) are
// prefetched. With `w` null only the record and the dual are
// (PackedRows::PrefetchWeights: a table the caches hold).
template <class Header, class Ids>
__attribute__((always_inline)) inline void PrefetchAhead(
    const char* buffer, const int64_t* visit, int64_t k, int64_t count,
    int64_t lines, const double* w, const double* duals, const Ids& ids_of,
    int64_t stride = 1) {
  constexpr int64_t kRowAhead = 8, kWeightAhead = 3;
  if (k + kRowAhead < count) {
    const char* p = buffer + visit[k + kRowAhead];
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
    __builtin_prefetch(p + 128);
    __builtin_prefetch(p + 192);
    for (int64_t line = 4; line < lines; ++line) {
      __builtin_prefetch(p + 64 * line);
    }
  }
  if (k + kWeightAhead < count) {
    const Header* h =
        reinterpret_cast<const Header*>(buffer + visit[k + kWeightAhead]);
    const int32_t* ids = reinterpret_cast<const int32_t*>(h + 1);
    const int32_t num_ids = ids_of(h);
    if (stride == 1) {
      if (w != nullptr) {
        for (int32_t e = 0; e < num_ids; ++e) {
          __builtin_prefetch(w + ids[e], 1);
        }
      }
      __builtin_prefetch(duals + h->row, 1);
      return;
    }
    // Bytes from a block's start to the start of its last line to fetch.
    const int64_t span = std::min<int64_t>(8 * (stride - 1), 192);
    for (int32_t e = 0; e < num_ids && w != nullptr; ++e) {
      const char* slot = reinterpret_cast<const char*>(w + ids[e] * stride);
      for (int64_t b = 0; b <= span; b += 64) __builtin_prefetch(slot + b, 1);
      __builtin_prefetch(slot + span, 1);
    }
    const char* block = reinterpret_cast<const char*>(duals + h->row * stride);
    for (int64_t b = 0; b <= span; b += 64) __builtin_prefetch(block + b, 1);
    __builtin_prefetch(block + span, 1);
  }
}

template <bool kValue>
using Flag = std::integral_constant<bool, kValue>;

// Calls body(loss, Flag<l1>, Flag<values>) with the loss as its concrete
// type (dispatched by name: no RTTI needed), so that the pass templates are
// instantiated per loss, L1 and explicit values.
template <class Body>
void Dispatch(const SolverOptions& options, bool has_values,
              const Body& body) {
  const bool l1 = options.l1 > 0.0;
  auto flags = [&](const auto& loss) {
    if (l1 && has_values) return body(loss, Flag<true>(), Flag<true>());
    if (l1) return body(loss, Flag<true>(), Flag<false>());
    if (has_values) return body(loss, Flag<false>(), Flag<true>());
    return body(loss, Flag<false>(), Flag<false>());
  };
  const DualLossUpdater* loss = options.loss;
  const std::string name = loss->Name();
#define TF_SDCA_PASS(NAME, TYPE) \
  if (name == NAME) return flags(static_cast<const TYPE&>(*loss));
  TF_SDCA_PASS("logistic_loss", LogisticLossUpdater)
  TF_SDCA_PASS("squared_loss", SquaredLossUpdater)
  TF_SDCA_PASS("hinge_loss", HingeLossUpdater)
  TF_SDCA_PASS("smooth_hinge_loss", SmoothHingeLossUpdater)
  TF_SDCA_PASS("absolute_loss", AbsoluteLossUpdater)
  TF_SDCA_PASS("poisson_loss", PoissonLossUpdater)
#undef TF_SDCA_PASS
}

// Runs passes() with CoCoA+ adding for K = num_loss_partitions: the passes
// solve against w + K * (local change) and the weights keep 1/K of it.
template <class Passes>
void WithPartitionScaling(const SolverOptions& options, int64_t m,
                          double* weights, const Passes& passes) {
  const int partitions = options.num_loss_partitions;
  std::vector<double> w0;
  if (partitions > 1) w0.assign(weights, weights + m);
  passes();
  if (partitions > 1) {
    for (int64_t j = 0; j < m; ++j) {
      weights[j] = w0[j] + (weights[j] - w0[j]) / partitions;
    }
  }
}
}  // namespace row_step
}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_ROW_STEP_H_
