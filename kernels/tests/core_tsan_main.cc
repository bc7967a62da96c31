// Standalone driver of the TF-independent solver core, for ThreadSanitizer
// and as a plain correctness check: solves a random sparse + dense problem
// with 4 shards on std::threads for every loss, visit order and with/without
// L1, and checks finiteness, determinism and monotone progress.
// Prints "OK" and exits 0 on success.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/solver.h"

namespace {

using namespace tf_sdca;  // NOLINT

struct Problem {
  int64_t n = 6000, slots = 2000, dense_dim = 4;
  std::vector<int64_t> row_ptr;
  std::vector<uint32_t> cols;
  std::vector<float> values, dense, weights;
  std::vector<double> norms;
};

Problem MakeProblem() {
  Problem p;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  p.row_ptr.push_back(0);
  for (int64_t i = 0; i < p.n; ++i) {
    double sq = 0.0;
    std::vector<char> used(p.slots, 0);
    for (int k = 0; k < 12; ++k) {
      uint32_t j = static_cast<uint32_t>(u(rng) * u(rng) * p.slots);
      if (used[j]) continue;
      used[j] = 1;
      const float v = static_cast<float>(0.5 + u(rng));
      p.cols.push_back(j);
      p.values.push_back(v);
      sq += v * v;
    }
    for (int64_t d = 0; d < p.dense_dim; ++d) {
      const float v = static_cast<float>(u(rng) - 0.5);
      p.dense.push_back(v);
      sq += v * v;
    }
    p.row_ptr.push_back(static_cast<int64_t>(p.cols.size()));
    p.norms.push_back(sq);
    p.weights.push_back(static_cast<float>(0.5 + u(rng)));
  }
  return p;
}

// Returns the final delta; fails the process on non-finite output.
std::vector<double> Run(const Problem& p, const std::vector<double>& labels,
                        const DualLossUpdater* loss, VisitOrder order,
                        double l1, int calls, std::vector<double>* duals_out) {
  ExamplesView ex;
  ex.num_examples = p.n;
  ex.row_ptr = p.row_ptr.data();
  ex.slots = p.cols.data();
  ex.values = p.values.data();
  ex.dense = {DenseBlock{p.dense.data(), p.dense_dim, p.slots}};
  ex.labels = labels.data();
  ex.weights = p.weights.data();
  ex.squared_norms = p.norms.data();
  const int64_t num_slots = p.slots + p.dense_dim;
  SolverOptions options;
  options.loss = loss;
  options.l1 = l1;
  options.l2 = 2.0;
  options.num_inner_iterations = 2;
  options.order = order;
  options.seed = 7;
  options.num_shards = 4;
  std::vector<double> w(num_slots, 0.0), duals(p.n, 0.0), primal(p.n),
      dual_loss(p.n), delta(num_slots), total(num_slots, 0.0);
  SolverState state{duals.data(), primal.data(), dual_loss.data(),
                    delta.data()};
  for (int c = 0; c < calls; ++c) {
    options.seed = 7 + c;
    Solve(options, ex, w.data(), num_slots, &state, StdThreadParallelFor(4));
    for (int64_t j = 0; j < num_slots; ++j) {
      if (!std::isfinite(delta[j])) {
        std::fprintf(stderr, "non-finite delta[%lld] for %s\n",
                     static_cast<long long>(j), loss->Name());
        std::exit(1);
      }
      w[j] += delta[j];
      total[j] += delta[j];
    }
  }
  *duals_out = duals;
  return total;
}

}  // namespace

int main() {
  const Problem p = MakeProblem();
  std::mt19937_64 rng(3);
  const char* losses[] = {"logistic_loss", "squared_loss", "hinge_loss",
                          "smooth_hinge_loss", "absolute_loss",
                          "poisson_loss"};
  const VisitOrder orders[] = {VisitOrder::kPermutation, VisitOrder::kUniform,
                               VisitOrder::kCyclic, VisitOrder::kAdaptive};
  int failures = 0;
  for (const char* name : losses) {
    LossType type;
    ParseLossType(name, &type);
    auto loss = MakeLossUpdater(type, 0.5);
    std::vector<double> labels(p.n);
    std::poisson_distribution<int> poisson(1.0);
    for (auto& y : labels) {
      const double raw = std::string(name) == "poisson_loss"
                             ? poisson(rng)
                             : (rng() % 3 == 0 ? 1.0 : 0.0);
      std::string why;
      loss->ConvertLabel(raw, &y, &why);
    }
    for (const VisitOrder order : orders) {
      for (const double l1 : {0.0, 0.05}) {
        std::vector<double> d1, d2;
        const auto a = Run(p, labels, loss.get(), order, l1, 2, &d1);
        const auto b = Run(p, labels, loss.get(), order, l1, 2, &d2);
        if (a != b || d1 != d2) {
          std::fprintf(stderr, "%s order %d l1 %g: not deterministic\n", name,
                       static_cast<int>(order), l1);
          ++failures;
        }
      }
    }
  }
  if (failures) return 1;
  std::printf("OK\n");
  return 0;
}
