// Standalone driver of the multiclass losses for the sanitizers: the block
// steps of softmax and multiclass hinge on ordinary and extreme blocks
// (q from 1e-12 to 1e12, scores up to 1e300 in size, duals at the simplex's
// corners), then PackedRows::SolveBlocks / EvaluateBlocks / BlockRowLosses /
// AddBlockChanges / CheckBlockDuals over packed rows with K from 2 to 50,
// sparse (repeated and hot ids, explicit values, some extreme) and dense
// features, zero example weights, every visiting order the losses take and
// L1, and the hinge's three block steps (HingeStep). Checks that every dual
// block stays feasible and every number finite where the inputs were;
// prints "OK" and exits 0 on success. Built with -fsanitize=address,undefined
// by tests/test_core_sanitizers.py.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/multiclass_loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"
#include "kernels/tests/sequential_shares.h"

namespace {

using namespace tf_sdca;  // NOLINT

void Fail(const std::string& what) {
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  std::exit(1);
}

// A random feasible block e_y - p (p on the simplex; sometimes a corner).
std::vector<double> Block(int k, int label, std::mt19937_64* rng) {
  std::vector<double> p(k, 0.0);
  if ((*rng)() % 4 == 0) {
    p[(*rng)() % k] = 1.0;
  } else {
    std::exponential_distribution<double> e(1.0);
    double sum = 0.0;
    for (double& v : p) sum += (v = e(*rng));
    for (double& v : p) v /= sum;
  }
  std::vector<double> dual(k);
  for (int j = 0; j < k; ++j) dual[j] = (j == label ? 1.0 : 0.0) - p[j];
  return dual;
}

void BlockSteps(const MulticlassLoss& loss, std::mt19937_64* rng) {
  const int k = loss.num_classes();
  const double qs[] = {1e-12, 1e-6, 1e-2, 1.0, 1e2, 1e6, 1e12};
  const double scales[] = {0.0, 1e-300, 1.0, 1e3, 1e30, 1e300};
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> scores(k), next(k), work(4 * k);
  for (int trial = 0; trial < 400; ++trial) {
    const int label = static_cast<int>((*rng)() % k);
    const std::vector<double> dual = Block(k, label, rng);
    const double q = qs[(*rng)() % 7];
    const double scale = scales[(*rng)() % 6];
    for (double& z : scores) z = scale * normal(*rng);
    loss.UpdateBlock(label, dual.data(), scores.data(), q, next.data(),
                     work.data());
    if (!loss.DualInDomain(next.data(), label)) {
      Fail(std::string(loss.Name()) + ": a block step left the simplex (q " +
           std::to_string(q) + ", scores of size " + std::to_string(scale) +
           ")");
    }
    if (scale < 1e300) {  // exp and sums of scores near 1e300 may be inf
      const double primal = loss.PrimalLoss(scores.data(), label);
      const double dual_loss = loss.DualLoss(next.data(), label);
      if (!std::isfinite(primal) || !std::isfinite(dual_loss)) {
        Fail(std::string(loss.Name()) + ": a non-finite loss");
      }
    }
  }
}

void PackedPasses(const MulticlassLoss& loss, bool shrinking,
                  std::mt19937_64* rng) {
  const int k = loss.num_classes();
  const int64_t n = 257, vocab = 40, dense_dim = 3;
  std::vector<int64_t> row_ptr{0};
  std::vector<int32_t> ids;
  std::vector<float> values, dense, weights;
  std::vector<double> labels, norms;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int nnz = static_cast<int>((*rng)() % 6);
    double norm = 0.0;
    for (int e = 0; e < nnz; ++e) {
      ids.push_back(static_cast<int32_t>(e == 1 && i % 11 == 0
                                             ? ids.back()  // a repeated id
                                             : (*rng)() % vocab));
      const float v = i % 50 == 7 ? 1e15f : normal(*rng);
      values.push_back(v);
      norm += static_cast<double>(v) * v;
    }
    row_ptr.push_back(static_cast<int64_t>(ids.size()));
    for (int64_t d = 0; d < dense_dim; ++d) {
      const float v = d == 0 ? 1.0f : (i % 5 == 0 ? 0.0f : normal(*rng));
      dense.push_back(v);
      norm += static_cast<double>(v) * v;
    }
    weights.push_back(i % 17 == 0 ? 0.0f : 1.0f + (i % 3));
    labels.push_back(static_cast<double>((*rng)() % k));
    norms.push_back(norm);
  }
  ResidentData data;
  data.num_examples = n;
  data.num_sparse_features = vocab;
  data.row_ptr = row_ptr.data();
  data.ids = ids.data();
  data.values = values.data();
  data.dense = dense.data();
  data.dense_dim = dense_dim;
  data.labels = labels.data();
  data.example_weights = weights.data();
  data.squared_norms = norms.data();
  for (const int threads : {1, 2, 3}) {
  PackedRows rows;
  std::string error;
  if (!rows.Pack(data, threads, 1, StdThreadParallelFor(1), &error)) {
    Fail(error);
  }
  const VisitOrder orders[] = {VisitOrder::kPermutation, VisitOrder::kUniform,
                               VisitOrder::kCyclic, VisitOrder::kShrinking};
  for (const double l2 : {1e-9, 1.0, 1e9}) {
    for (const double l1 : {0.0, 0.1}) {
      for (const VisitOrder order : orders) {
        if (order == VisitOrder::kShrinking && !shrinking) continue;
        SolverOptions options;
        options.l1 = l1;
        options.l2 = l2;
        options.order = order;
        options.num_inner_iterations = 3;
        options.num_loss_partitions = l1 > 0 ? 2 : 1;
        options.seed = (*rng)();
        std::vector<double> w(rows.num_slots() * k, 0.0), alpha(n * k, 0.0);
        if (threads > 1 && l1 > 0.0) {
          rows.SolveBlocksLockstep(options, loss, w.data(), alpha.data());
        } else {
          rows.SolveBlocks(options, loss, w.data(), alpha.data());
        }
        if (!rows.CheckBlockDuals(alpha.data(), loss, &error)) Fail(error);
        const ObjectiveParts parts = rows.EvaluateBlocks(
            options, loss, w.data(), alpha.data(), 2, StdThreadParallelFor(2));
        std::vector<double> primal(n), dual(n);
        rows.BlockRowLosses(options, loss, w.data(), alpha.data(),
                            primal.data(), dual.data());
        // The weights again from the duals alone: W = (1/l2) sum s x a^T
        // (CoCoA+ adding keeps exactly that).
        std::vector<double> rebuilt(w.size(), 0.0);
        rows.AddBlockChanges(alpha.data(), k, 1.0 / l2, rebuilt.data());
        for (size_t j = 0; j < w.size(); ++j) {
          if (!std::isfinite(w[j]) || !std::isfinite(rebuilt[j])) {
            Fail(std::string(loss.Name()) + ": a non-finite weight");
          }
        }
        if (!std::isfinite(parts.primal_loss) &&
            std::isfinite(parts.l2_norm_sq)) {
          // Possible only with the 1e15 values and a tiny l2; the parts are
          // reported, not written into any state.
          continue;
        }
      }
    }
  }
  }
}

// The relative duality gap of (w, alpha) on `rows`.
double RelativeGap(const PackedRows& rows, const SolverOptions& options,
                   const MulticlassLoss& loss, const std::vector<double>& w,
                   const std::vector<double>& alpha) {
  const ObjectiveParts parts = rows.EvaluateBlocks(
      options, loss, w.data(), alpha.data(), 1, StdThreadParallelFor(1));
  const double primal = parts.primal_loss +
                        0.5 * options.l2 * parts.l2_norm_sq +
                        options.l1 * parts.l1_norm;
  const double gap = parts.primal_loss + parts.dual_loss +
                     options.l2 * parts.l2_norm_sq +
                     options.l1 * parts.l1_norm;
  return gap / primal;
}

// Threads over split records, on n rows with an intercept, a positive
// dense count, frequent (hot) and rare (cold) ids, 20 epochs of
// 1, 2, 3, 4 and 8 threads, in lockstep (the timing of truly parallel
// threads) and on real threads: the duals stay feasible, no update is lost
// (W equals (1/l2) sum_i s_i x_i alpha_i^T) and the gap is >= 0. With
// `report`, prints each run's relative gap ("K threads lockstep gap").
void ThreadedBlocks(const MulticlassLoss& loss, double l2, int64_t n,
                    bool report) {
  const int k = loss.num_classes();
  const int64_t vocab = 3000, dense_dim = 2;
  std::mt19937_64 rng(7);
  std::vector<int64_t> row_ptr{0};
  std::vector<int32_t> ids;
  std::vector<float> dense, weights;
  std::vector<double> labels, norms;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % k);
    std::vector<int32_t> row;
    while (row.size() < 8) {
      // Zipf-like ids (a few in most rows, most in a handful); every other
      // id of a row leans to its class.
      int32_t id = static_cast<int32_t>(std::pow(vocab, uniform(rng))) - 1;
      if (row.size() % 2 == 0) id = (id / k) * k + label;
      id = std::min<int32_t>(id, vocab - 1);
      if (std::find(row.begin(), row.end(), id) == row.end()) {
        row.push_back(id);
      }
    }
    ids.insert(ids.end(), row.begin(), row.end());
    row_ptr.push_back(static_cast<int64_t>(ids.size()));
    const float count = 0.5f + 0.2f * label + 0.3f * std::fabs(normal(rng));
    dense.push_back(1.0f);  // an intercept
    dense.push_back(count);
    weights.push_back(1.0f);
    labels.push_back(label);
    norms.push_back(8.0 + 1.0 + static_cast<double>(count) * count);
  }
  ResidentData data;
  data.num_examples = n;
  data.num_sparse_features = vocab;
  data.row_ptr = row_ptr.data();
  data.ids = ids.data();
  data.dense = dense.data();
  data.dense_dim = dense_dim;
  data.labels = labels.data();
  data.example_weights = weights.data();
  data.squared_norms = norms.data();
  SolverOptions options;
  options.l2 = l2;
  options.order = VisitOrder::kPermutation;
  options.num_inner_iterations = 1;
  for (const int threads : {1, 2, 3, 4, 8}) {
    PackedRows rows;
    std::string error;
    if (!rows.Pack(data, threads, 1, StdThreadParallelFor(1), &error)) {
      Fail(error);
    }
    if (threads > 1 &&
        (rows.hot_ids().empty() ||
         static_cast<int64_t>(rows.hot_ids().size()) == vocab)) {
      Fail("the ids were not split into hot and cold ones");
    }
    for (const bool lockstep : {true, false}) {
      if (threads == 1 && !lockstep) continue;
      std::vector<double> w(rows.num_slots() * k, 0.0), alpha(n * k, 0.0);
      for (int epoch = 0; epoch < 20; ++epoch) {
        options.seed = 100 + epoch;
        if (lockstep) {
          rows.SolveBlocksLockstep(options, loss, w.data(), alpha.data());
        } else {
          rows.SolveBlocks(options, loss, w.data(), alpha.data());
        }
      }
      if (!rows.CheckBlockDuals(alpha.data(), loss, &error)) Fail(error);
      std::vector<double> rebuilt(w.size(), 0.0);
      rows.AddBlockChanges(alpha.data(), k, 1.0 / options.l2, rebuilt.data());
      double worst = 0.0, scale = 0.0;
      for (size_t j = 0; j < w.size(); ++j) {
        worst = std::max(worst, std::fabs(w[j] - rebuilt[j]));
        scale = std::max(scale, std::fabs(rebuilt[j]));
      }
      if (!(worst <= 1e-9 * scale)) {
        Fail(std::string(loss.Name()) + ": " + std::to_string(threads) +
             " threads lost updates: |W - W(alpha)| = " +
             std::to_string(worst) + " of " + std::to_string(scale));
      }
      const double gap = RelativeGap(rows, options, loss, w, alpha);
      if (!(gap >= 0.0)) Fail(std::string(loss.Name()) + ": a negative gap");
      if (report) {
        std::printf("%s %d %d %.6e\n", loss.Name(), threads, lockstep ? 1 : 0,
                    gap);
      }
    }
  }
}

// Epochs of softmax (K = 3, l2 = 1) until the relative duality gap is
// below 1e-8 (at most `most`) on 20,000 dense rows sorted as many data sets
// are (the label's mix and the columns' means differ between the first and
// the second half), packed for `threads`, each epoch on one thread or, with
// more, SolveBlocksSequential: the threads' shares one after another, as
// threads on a loaded machine run them.
int SortedEpochsToGap(int threads, VisitOrder order, int most) {
  constexpr int64_t kRows = 20000, kDense = 4;
  const auto loss = MakeMulticlassLoss(MulticlassLossType::kSoftmax, 3);
  std::mt19937_64 rng(13);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> dense, weights(kRows, 1.0f);
  std::vector<double> labels, norms;
  for (int64_t i = 0; i < kRows; ++i) {
    const bool first = i < kRows / 2;
    // Classes 0 and 1 in the first half, 1 and 2 (mostly) in the second.
    const int label = first ? static_cast<int>(rng() % 2)
                            : 1 + static_cast<int>(rng() % 2 || rng() % 8 == 0);
    double norm = 1.0;
    dense.push_back(1.0f);  // an intercept
    for (int64_t c = 1; c < kDense; ++c) {
      const double x = normal(rng) + 0.6 * label + (first ? 0.9 : -0.9) * c;
      dense.push_back(static_cast<float>(x));
      norm += x * x;
    }
    labels.push_back(label);
    norms.push_back(norm);
  }
  ResidentData data;
  data.num_examples = kRows;
  data.dense = dense.data();
  data.dense_dim = kDense;
  data.labels = labels.data();
  data.example_weights = weights.data();
  data.squared_norms = norms.data();
  PackedRows rows;
  std::string error;
  if (!rows.Pack(data, threads, 1, StdThreadParallelFor(1), &error)) {
    Fail(error);
  }
  SolverOptions options;
  options.l2 = 1.0;
  options.order = order;
  options.num_inner_iterations = 1;
  std::vector<double> w(rows.num_slots() * 3, 0.0), alpha(kRows * 3, 0.0);
  for (int epoch = 0; epoch < most; ++epoch) {
    options.seed = static_cast<uint64_t>(epoch);
    rows.SolveBlocksSequential(options, *loss, w.data(), alpha.data());
    if (RelativeGap(rows, options, *loss, w, alpha) < 1e-8) return epoch + 1;
  }
  return most;
}

// Two threads whose shares run one after another (a loaded machine) need
// about one thread's epochs on sorted rows in the orders the blocks' threads
// take: 'uniform' draws within a random share of the rows each pass (a block
// of consecutive rows would alternate between the two halves' optima), the
// others cut one permutation.
void CheckSequentialSharesOnSortedRows() {
  for (const VisitOrder order :
       {VisitOrder::kUniform, VisitOrder::kPermutation}) {
    const int one = SortedEpochsToGap(1, order, 300);
    const int two = SortedEpochsToGap(2, order, 300);
    const std::string error =
        SequentialSharesFailure(order, one, two, 300);
    if (!error.empty()) Fail(error);
  }
}

}  // namespace

// No arguments: the checks above (for the sanitizers), threads on 3,000 rows.
// "threads": ThreadedBlocks on 24,000 rows, reporting the gaps
// (tests/test_core_threads.py compares them). "sequential": two threads'
// shares one after another on sorted rows against one thread's epochs.
// "races" (the same file under
// ThreadSanitizer): only the threads on 3,000 rows; the one-thread block
// steps and passes run under ASan + UBSan (tests/test_core_sanitizers.py)
// and took most of a TSan run.
int main(int argc, char** argv) {
  const bool races_only = argc > 1 && std::string(argv[1]) == "races";
  if (argc > 1 && std::string(argv[1]) == "sequential") {
    CheckSequentialSharesOnSortedRows();
    std::printf("OK\n");
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "threads") {
    // l2 where one thread ends 20 epochs at a gap of ~5e-5 (softmax) and
    // ~2e-3 (the hinge's gap falls sublinearly).
    ThreadedBlocks(*MakeMulticlassLoss(MulticlassLossType::kSoftmax, 5), 0.2,
                   24000, true);
    ThreadedBlocks(
        *MakeMulticlassLoss(MulticlassLossType::kMulticlassHinge, 5), 20.0,
        24000, true);
    return 0;
  }
  std::mt19937_64 rng(16);
  for (const int k : {2, 3, 7, 50}) {
    if (races_only) break;
    for (const MulticlassLossType type :
         {MulticlassLossType::kSoftmax, MulticlassLossType::kMulticlassHinge}) {
      const auto loss = MakeMulticlassLoss(type, k);
      BlockSteps(*loss, &rng);
      PackedPasses(*loss, type == MulticlassLossType::kMulticlassHinge, &rng);
    }
    // The hinge's sequential dual ascent steps (HingeStep) on the same
    // extreme blocks and passes.
    for (const HingeStep step :
         {HingeStep::kSteepestAscent, HingeStep::kNearMaxGain}) {
      const auto loss =
          MakeMulticlassLoss(MulticlassLossType::kMulticlassHinge, k, step);
      BlockSteps(*loss, &rng);
      PackedPasses(*loss, true, &rng);
    }
  }
  for (const MulticlassLossType type :
       {MulticlassLossType::kSoftmax, MulticlassLossType::kMulticlassHinge}) {
    ThreadedBlocks(*MakeMulticlassLoss(type, 5), 1.0, 3000, false);
  }
  std::printf("OK\n");
  return 0;
}
