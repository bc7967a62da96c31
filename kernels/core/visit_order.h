// The one generator of SDCA's visiting orders: every pass of the core (one
// thread or lock-free threads over packed rows, for the epoch ops and for
// the mini-batch op alike) draws the rows it visits here.
//
// The draws are a function of (seed, stream, pass) only, from a fully
// specified generator (random.h), so a visiting order is the same on every
// platform and in every process.
#ifndef TF_SDCA_KERNELS_CORE_VISIT_ORDER_H_
#define TF_SDCA_KERNELS_CORE_VISIT_ORDER_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/random.h"
#include "kernels/core/solver_options.h"

namespace tf_sdca {

// The draws of pass `pass` of `stream`: stream 0 is a whole pass's order
// (with lock-free threads that draw: the permutation cut into their
// shares), stream t + 1 lock-free thread t's draws from its share.
inline Rng PassRng(uint64_t seed, uint64_t stream, int pass) {
  return Rng(MixSeed(seed, stream, static_cast<uint64_t>(pass)));
}

// The adaptive order's weight of a row: its dual residual |alpha_i +
// phi_i'(w.x_i)| (zero at the optimum) scaled by s_i sqrt(|x_i|^2 + l2
// gamma), gamma the strong convexity of phi* (Csiba, Qu and Richtarik,
// "Stochastic Dual Coordinate Ascent with Adaptive Probabilities", ICML
// 2015). 0 for a row with s_i <= 0 or a non-finite weight.
inline double AdaptiveScore(const DualLossUpdater& loss, double l2, double s,
                            double norm, double label, double dual,
                            double wx) {
  if (!(s > 0.0)) return 0.0;
  const double kappa = dual + loss.PrimalLossDerivative(wx, label);
  const double p = s * std::sqrt(norm + l2 * loss.DualStrongConvexity()) *
                   std::fabs(kappa);
  return std::isfinite(p) ? p : 0.0;
}

// Fisher-Yates over out[0, n): for k = n - 1 down to 1, swaps out[k] with
// out[rng->Below(k + 1)]. The draws do not depend on what out holds, so
// they are made kShuffleAhead swaps early and each drawn slot prefetched:
// over millions of rows (an int64 per row: 32 MB at 4M rows, past the
// caches) every swap's random slot was a cache miss waited on in turn, a
// pass's order took ~7% of the epoch; with the misses overlapped ~3x less
// time. The same draws and swaps, so the same order, bit for bit.
inline void Shuffle(Rng* rng, int64_t n, int64_t* out) {
  constexpr int64_t kShuffleAhead = 32;  // a power of two
  int64_t drawn[kShuffleAhead];
  int64_t next = n - 1;  // the k whose draw comes next
  auto draw = [&] {
    const int64_t j = static_cast<int64_t>(
        rng->Below(static_cast<uint64_t>(next + 1)));
    drawn[next & (kShuffleAhead - 1)] = j;
    __builtin_prefetch(out + j, 1);
    --next;
  };
  for (int64_t i = 0; i < kShuffleAhead && next > 0; ++i) draw();
  for (int64_t k = n - 1; k > 0; --k) {
    const int64_t j = drawn[k & (kShuffleAhead - 1)];
    if (next > 0) draw();
    std::swap(out[k], out[j]);
  }
}

// Writes the rows of [begin, end) that one pass visits, in visiting order,
// to out[0, end - begin), each as item(row) (the row itself, or where its
// record lies):
//   kCyclic      the rows in order;
//   kPermutation a uniformly random permutation (Fisher-Yates);
//   kShrinking   the same: the caller passes only the rows not shrunk,
//                and draws passes over them until they took n steps
//                (PackedRows::Solve on one thread; see ShrinkingMarks);
//   kUniform     end - begin draws with replacement;
//   kAdaptive    end - begin draws with replacement, row i with probability
//                half scores[i] / sum(scores) and half uniform, so that
//                every row keeps a positive probability (scores[i]:
//                AdaptiveScore at the pass's start; indexed by row).
template <class Item>
void FillVisitOrder(VisitOrder order, int64_t begin, int64_t end,
                    const double* scores, Rng* rng, const Item& item,
                    int64_t* out) {
  const int64_t n = end - begin;
  switch (order) {
    case VisitOrder::kCyclic:
      for (int64_t k = 0; k < n; ++k) out[k] = item(begin + k);
      return;
    case VisitOrder::kPermutation:
    case VisitOrder::kShrinking:
      for (int64_t k = 0; k < n; ++k) out[k] = item(begin + k);
      Shuffle(rng, n, out);
      return;
    case VisitOrder::kUniform:
      for (int64_t k = 0; k < n; ++k) out[k] = item(begin + rng->Below(n));
      return;
    case VisitOrder::kAdaptive: {
      double total = 0.0;
      for (int64_t i = begin; i < end; ++i) total += scores[i];
      const double uniform = total > 0.0 ? total / n : 1.0;
      std::vector<double> cumulative(n);
      double running = 0.0;
      for (int64_t k = 0; k < n; ++k) {
        running += 0.5 * scores[begin + k] + 0.5 * uniform;
        cumulative[k] = running;
      }
      // Each draw inverts the cumulative scores: the first k with
      // cumulative[k] > u (std::upper_bound's k). A guide table (Chen and
      // Asau, 1974) finds it in about one step: cell j of n holds the k of
      // the threshold cell * j, and a draw u >= cell * j scans forward from
      // it. A binary search over the n rows took log2 n mispredicted
      // branches a draw, most of an adaptive pass over short rows (fair's
      // 6,366 rows of 9 columns: 2.5-4x a permutation pass). The same k,
      // so the same rows, as the binary search; it stays where the scores'
      // sum is not a positive finite number.
      const double cell = running / n;
      if (!(cell > 0.0) || !std::isfinite(running)) {
        for (int64_t k = 0; k < n; ++k) {
          const double u = rng->Uniform() * running;
          const int64_t pick =
              std::upper_bound(cumulative.begin(), cumulative.end(), u) -
              cumulative.begin();
          out[k] = item(begin + std::min(pick, n - 1));
        }
        return;
      }
      std::vector<int64_t> guide(n);
      for (int64_t j = 0, k = 0; j < n; ++j) {
        const double threshold = cell * static_cast<double>(j);
        while (k < n && cumulative[k] <= threshold) ++k;
        guide[j] = k;
      }
      for (int64_t d = 0; d < n; ++d) {
        const double u = rng->Uniform() * running;
        const double q = u / cell;
        int64_t j = q < static_cast<double>(n) ? static_cast<int64_t>(q)
                                               : n - 1;
        // (u / cell rounded up past a threshold: step back below u.)
        while (j > 0 && cell * static_cast<double>(j) > u) --j;
        int64_t pick = guide[j];
        while (pick < n && cumulative[pick] <= u) ++pick;
        out[d] = item(begin + std::min(pick, n - 1));
      }
      return;
    }
  }
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_VISIT_ORDER_H_
