#include "kernels/core/asdca.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/visit_order.h"

namespace tf_sdca {

namespace {

// (1 - theta)^k for the step counts k between a slot's changes: a table for
// the short gaps (a dense column changes every step, k = 1), pow beyond.
class Decay {
 public:
  explicit Decay(double theta) : base_(1.0 - theta), table_(kTable) {
    double p = 1.0;
    for (int64_t k = 0; k < kTable; ++k, p *= base_) table_[k] = p;
  }
  double operator()(int64_t k) const {
    return k < kTable ? table_[k] : std::pow(base_, static_cast<double>(k));
  }

 private:
  static constexpr int64_t kTable = 1024;
  const double base_;
  std::vector<double> table_;
};

}  // namespace

bool AsdcaSupportsLoss(const DualLossUpdater& loss, std::string* error) {
  if (loss.DualStrongConvexity() > 0.0) return true;
  *error = std::string(loss.Name()) +
           " is not smooth: ASDCA converges for the smooth losses only "
           "(logistic_loss, squared_loss, smooth_hinge_loss); use "
           "smooth_hinge_loss for a hinge-like loss";
  return false;
}

double AsdcaTheoryTheta(const PackedRows& rows, const DualLossUpdater& loss,
                        double l2, int64_t batch_size) {
  double max_curvature = 0.0;  // max_i s_i |x_i|^2
  for (int64_t i = 0; i < rows.num_examples(); ++i) {
    const PackedRows::RowView r = rows.Row(i);
    if (r.weight > 0.0f) {
      max_curvature = std::max(max_curvature, r.weight * r.norm);
    }
  }
  if (!(max_curvature > 0.0)) return 0.25;
  const double k = l2 * loss.DualStrongConvexity() / max_curvature;
  const double m = static_cast<double>(std::max<int64_t>(batch_size, 1));
  return 0.25 * std::min({1.0, std::sqrt(k / m), k,
                          std::cbrt(k * k) / std::cbrt(m)});
}

namespace {

// The passes, specialised for L1 or not (v = shrink(W) is W without).
template <bool kHasL1>
void AsdcaPasses(const PackedRows& rows, const SolverOptions& options,
                 int64_t batch_size, double theta, double* weights,
                 double* duals, double* iterate) {
  const int64_t n = rows.num_examples();
  const int64_t slots = rows.num_slots();
  const int64_t num_sparse = rows.num_sparse_features();
  const int64_t dd = rows.dense_dim();
  const DualLossUpdater& loss = *options.loss;
  const double shrinkage = options.l1 / options.l2;
  const double inv_l2 = 1.0 / options.l2;
  const int64_t m = std::max<int64_t>(batch_size, 1);
  auto v_of = [&](int64_t j) {
    return kHasL1 ? ShrinkL1(weights[j], shrinkage) : weights[j];
  };
  const Decay decay(theta);
  const int lines = static_cast<int>(rows.PrefetchLines());

  // Slot j's w is v_j + decay(t - since) * offset. While a step
  // materialises the slots its batch touches, since = t + 1 marks them and
  // offset holds w_j(t) itself. One struct per slot: a random id costs one
  // cache miss for both.
  struct Lazy {
    double offset;
    int64_t since;
  };
  std::vector<Lazy> lazy(slots);
  for (int64_t j = 0; j < slots; ++j) lazy[j] = {iterate[j] - v_of(j), 0};
  int64_t t = 0;

  std::vector<int64_t> order(n);
  std::vector<double> margins(m);
  std::vector<int64_t> touched;
  // Calls fn(slot, x) for row r's features (sparse, then dense columns).
  auto for_each_feature = [&](const PackedRows::RowView& r, auto&& fn) {
    for (int32_t e = 0; e < r.nnz; ++e) {
      fn(static_cast<int64_t>(r.ids[e]), r.Value(e));
    }
    for (int64_t c = 0; c < dd; ++c) {
      fn(num_sparse + c, static_cast<double>(r.dense[c]));
    }
  };
  // The rows are visited in a random order: their records (and, once a
  // record is in cache, its ids' weights and lazy state) are fetched a few
  // rows ahead, as SDCA's passes do (PrefetchAhead in row_step.h).
  constexpr int64_t kRowAhead = 8, kSlotAhead = 3;
  auto prefetch = [&](int64_t k) {
    if (k + kRowAhead < n) rows.PrefetchRow(order[k + kRowAhead], lines);
    if (k + kSlotAhead < n) {
      const PackedRows::RowView r = rows.Row(order[k + kSlotAhead]);
      for (int32_t e = 0; e < r.nnz; ++e) {
        __builtin_prefetch(weights + r.ids[e]);
        __builtin_prefetch(lazy.data() + r.ids[e], 1);
      }
    }
  };

  for (int pass = 0; pass < options.num_inner_iterations; ++pass) {
    if (options.Cancelled()) break;
    Rng rng = PassRng(options.seed, 0, pass);
    FillVisitOrder(VisitOrder::kPermutation, 0, n, nullptr, &rng,
                   [](int64_t i) { return i; }, order.data());
    int64_t since_check = 0;
    for (int64_t start = 0; start < n; start += m) {
      if ((since_check += m) >= kCancelCheckRows) {
        since_check = 0;
        if (options.Cancelled()) break;
      }
      const int64_t stop = std::min(n, start + m);
      // Every margin of the batch at the same u = (1 - theta) w(t) + theta
      // v = v + decay(t + 1 - since) * offset, before any dual moves.
      for (int64_t k = start; k < stop; ++k) {
        prefetch(k);
        const PackedRows::RowView r = rows.Row(order[k]);
        if (!(r.weight > 0.0f)) continue;
        double z = 0.0;
        for_each_feature(r, [&](int64_t j, double x) {
          const Lazy& s = lazy[j];
          z += x * (v_of(j) + decay(t + 1 - s.since) * s.offset);
        });
        margins[k - start] = z;
      }
      // The duals' steps; each slot they move is first materialised at t.
      touched.clear();
      for (int64_t k = start; k < stop; ++k) {
        const PackedRows::RowView r = rows.Row(order[k]);
        if (!(r.weight > 0.0f)) continue;
        double* dual = duals + r.row;
        const double target =
            -loss.PrimalLossDerivative(margins[k - start], r.label);
        const double updated = (1.0 - theta) * *dual + theta * target;
        const double change = updated - *dual;
        *dual = updated;
        if (change == 0.0) continue;
        const double coef = r.weight * change * inv_l2;
        for_each_feature(r, [&](int64_t j, double x) {
          Lazy& s = lazy[j];
          if (s.since != t + 1) {
            s.offset = v_of(j) + decay(t - s.since) * s.offset;
            s.since = t + 1;
            touched.push_back(j);
          }
          weights[j] += coef * x;
        });
      }
      // w(t + 1) = (1 - theta) w(t) + theta v on the slots whose v moved
      // (the others follow the closed form).
      for (const int64_t j : touched) {
        const double v = v_of(j);
        lazy[j].offset = (1.0 - theta) * lazy[j].offset + theta * v - v;
      }
      ++t;
    }
  }
  for (int64_t j = 0; j < slots; ++j) {
    iterate[j] = v_of(j) + decay(t - lazy[j].since) * lazy[j].offset;
  }
}

}  // namespace

void SolveAsdca(const PackedRows& rows, const SolverOptions& options,
                int64_t batch_size, double theta, double* weights,
                double* duals, double* iterate) {
  if (options.l1 > 0.0) {
    AsdcaPasses<true>(rows, options, batch_size, theta, weights, duals,
                      iterate);
  } else {
    AsdcaPasses<false>(rows, options, batch_size, theta, weights, duals,
                       iterate);
  }
}

}  // namespace tf_sdca
