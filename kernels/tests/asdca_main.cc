// Standalone driver of ASDCA over packed rows (kernels/core/asdca.h).
//
// 1. The lazy per-slot iterate against a plain dense implementation of the
//    paper's step (u, the duals, W and w all updated over every slot each
//    step), on the same batches: rows with sparse ids (repeated ids, empty
//    rows, explicit values), dense columns, zero-weight rows, with and
//    without L1, batch sizes 1, 7 and n, over three calls whose iterate is
//    carried from one to the next. Weights, duals and iterate must agree to
//    1e-11 (relative).
// 2. Convergence: ASDCA's duals reach SDCA's optimum (PackedRows::Solve
//    with 'permutation') on each smooth loss: the exact duality gap of
//    (W(alpha), alpha) falls below 1e-10 of the primal.
// 3. The refusal of the non-smooth losses and the theory's theta.
// Prints "OK" and exits 0 on success.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/asdca.h"
#include "kernels/core/loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"
#include "kernels/core/visit_order.h"

namespace {

using namespace tf_sdca;  // NOLINT

void Fail(const std::string& what) {
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  std::exit(1);
}

constexpr int64_t kVocab = 30, kDense = 3;

struct Data {
  int64_t n = 0;
  std::vector<int64_t> row_ptr{0};
  std::vector<int32_t> ids;
  std::vector<float> values, dense, weights;
  std::vector<double> labels, norms;

  Data(int64_t rows, LossType type, uint64_t seed) : n(rows) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    auto loss = MakeLossUpdater(type, 1.0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t nnz = static_cast<int64_t>(rng() % 5);
      for (int64_t k = 0; k < nnz; ++k) {
        ids.push_back(static_cast<int32_t>(rng() % kVocab));
        values.push_back(static_cast<float>(u(rng) * 2.0 - 0.5));
      }
      if (nnz > 0 && i % 11 == 0) {  // a repeated id
        ids.push_back(ids[row_ptr.back()]);
        values.push_back(0.5f);
      }
      row_ptr.push_back(static_cast<int64_t>(ids.size()));
      for (int64_t c = 0; c < kDense; ++c) {
        dense.push_back(c == 2 ? 1.0f : static_cast<float>(u(rng) - 0.5));
      }
      weights.push_back(i % 17 == 5 ? 0.0f : static_cast<float>(0.5 + u(rng)));
      const double raw = type == LossType::kSquared ? u(rng) * 3.0 - 1.0
                                                    : (u(rng) < 0.4 ? 1.0 : 0.0);
      double label;
      std::string error;
      if (!loss->ConvertLabel(raw, &label, &error)) Fail(error);
      labels.push_back(label);
    }
    norms.resize(n);
  }

  ResidentData View() {
    ResidentData d;
    d.num_examples = n;
    d.num_sparse_features = kVocab;
    d.row_ptr = row_ptr.data();
    d.ids = ids.data();
    d.values = values.data();
    d.dense = dense.data();
    d.dense_dim = kDense;
    d.labels = labels.data();
    d.example_weights = weights.data();
    std::string error;
    if (!ValidateRowPtr(d, static_cast<int64_t>(ids.size()), &error) ||
        !PrepareResidentRows(d, 0, n, norms.data(), &error)) {
      Fail(error);
    }
    d.squared_norms = norms.data();
    return d;
  }

  // Row i as a dense vector over the kVocab + kDense slots.
  std::vector<double> DenseRow(int64_t i) const {
    std::vector<double> x(kVocab + kDense, 0.0);
    for (int64_t k = row_ptr[i]; k < row_ptr[i + 1]; ++k) {
      x[ids[k]] += values[k];
    }
    for (int64_t c = 0; c < kDense; ++c) x[kVocab + c] = dense[i * kDense + c];
    return x;
  }
};

double Shrink(double w, double l1, double l2) { return ShrinkL1(w, l1 / l2); }

// One call of the paper's ASDCA written plainly: every slot of u, W, w
// updated each step; the batches are the same as SolveAsdca's.
void DenseReference(const Data& data, const DualLossUpdater& loss,
                    const SolverOptions& options, int64_t m, double theta,
                    std::vector<double>* W, std::vector<double>* alpha,
                    std::vector<double>* w) {
  const int64_t n = data.n, slots = kVocab + kDense;
  std::vector<int64_t> order(n);
  for (int pass = 0; pass < options.num_inner_iterations; ++pass) {
    Rng rng = PassRng(options.seed, 0, pass);
    FillVisitOrder(VisitOrder::kPermutation, 0, n, nullptr, &rng,
                   [](int64_t i) { return i; }, order.data());
    for (int64_t start = 0; start < n; start += m) {
      const int64_t stop = std::min(n, start + m);
      std::vector<double> u(slots);
      for (int64_t j = 0; j < slots; ++j) {
        u[j] = (1 - theta) * (*w)[j] +
               theta * Shrink((*W)[j], options.l1, options.l2);
      }
      std::vector<double> change(n, 0.0);
      for (int64_t k = start; k < stop; ++k) {
        const int64_t i = order[k];
        if (!(data.weights[i] > 0)) continue;
        const std::vector<double> x = data.DenseRow(i);
        double z = 0.0;
        for (int64_t j = 0; j < slots; ++j) z += x[j] * u[j];
        const double a = (1 - theta) * (*alpha)[i] +
                         theta * -loss.PrimalLossDerivative(z, data.labels[i]);
        change[i] = a - (*alpha)[i];
      }
      for (int64_t k = start; k < stop; ++k) {
        const int64_t i = order[k];
        if (change[i] == 0.0) continue;
        (*alpha)[i] += change[i];
        const std::vector<double> x = data.DenseRow(i);
        for (int64_t j = 0; j < slots; ++j) {
          (*W)[j] += data.weights[i] * change[i] * x[j] / options.l2;
        }
      }
      for (int64_t j = 0; j < slots; ++j) {
        (*w)[j] = (1 - theta) * (*w)[j] +
                  theta * Shrink((*W)[j], options.l1, options.l2);
      }
    }
  }
}

void Close(const std::vector<double>& a, const std::vector<double>& b,
           const std::string& what) {
  for (size_t j = 0; j < a.size(); ++j) {
    if (!(std::fabs(a[j] - b[j]) <= 1e-11 * (1.0 + std::fabs(b[j])))) {
      char buf[256];
      std::snprintf(buf, sizeof(buf), "%s[%zu]: %.17g vs reference %.17g",
                    what.c_str(), j, a[j], b[j]);
      Fail(buf);
    }
  }
}

void CheckAgainstReference() {
  for (LossType type :
       {LossType::kLogistic, LossType::kSquared, LossType::kSmoothHinge}) {
    for (double l1 : {0.0, 0.05}) {
      for (int64_t m : {1, 7, 61}) {
        Data data(61, type, 3);
        PackedRows rows;
        std::string error;
        if (!rows.Pack(data.View(), 1, 1, StdThreadParallelFor(1), &error)) {
          Fail(error);
        }
        auto loss = MakeLossUpdater(type, 1.0);
        SolverOptions options;
        options.loss = loss.get();
        options.l1 = l1;
        options.l2 = 0.5;
        options.num_inner_iterations = 2;
        const double theta = 0.3;
        const int64_t slots = kVocab + kDense;
        std::vector<double> W(slots, 0.0), alpha(data.n, 0.0), w(slots, 0.0);
        std::vector<double> W_ref = W, alpha_ref = alpha, w_ref = w;
        for (int call = 0; call < 3; ++call) {
          options.seed = 100 + call;
          SolveAsdca(rows, options, m, theta, W.data(), alpha.data(),
                     w.data());
          DenseReference(data, *loss, options, m, theta, &W_ref, &alpha_ref,
                         &w_ref);
          const std::string what = std::string(loss->Name()) + " m=" +
                                   std::to_string(m) + " l1=" +
                                   std::to_string(l1) + " call " +
                                   std::to_string(call) + ": ";
          Close(W, W_ref, what + "weights");
          Close(alpha, alpha_ref, what + "duals");
          Close(w, w_ref, what + "iterate");
        }
      }
    }
  }
}

void CheckConvergence() {
  for (LossType type :
       {LossType::kLogistic, LossType::kSquared, LossType::kSmoothHinge}) {
    Data data(400, type, 7);
    PackedRows rows;
    std::string error;
    if (!rows.Pack(data.View(), 1, 1, StdThreadParallelFor(1), &error)) {
      Fail(error);
    }
    auto loss = MakeLossUpdater(type, 1.0);
    SolverOptions options;
    options.loss = loss.get();
    options.l1 = 0.01;
    options.l2 = 1.0;
    const int64_t slots = kVocab + kDense;
    const double theta = AsdcaTheoryTheta(rows, *loss, options.l2, 8);
    if (!(theta > 0.0 && theta <= 0.25)) Fail("theory theta out of (0, 1/4]");
    std::vector<double> W(slots, 0.0), alpha(data.n, 0.0), w(slots, 0.0);
    double gap = 0.0, primal = 0.0;
    for (int call = 0; call < 400; ++call) {
      options.seed = call;
      options.num_inner_iterations = 5;
      SolveAsdca(rows, options, 8, theta, W.data(), alpha.data(), w.data());
      const ObjectiveParts p =
          rows.Evaluate(options, W.data(), alpha.data(), 1,
                        StdThreadParallelFor(1));
      primal = p.primal_loss + 0.5 * options.l2 * p.l2_norm_sq +
               options.l1 * p.l1_norm;
      gap = p.primal_loss + p.dual_loss + options.l2 * p.l2_norm_sq +
            options.l1 * p.l1_norm;
      if (gap < 1e-10 * primal) break;
    }
    if (!(gap < 1e-10 * primal)) {
      Fail(std::string(loss->Name()) + ": ASDCA's gap " +
           std::to_string(gap / primal) + " did not fall below 1e-10");
    }
    // SDCA's optimum: the same primal.
    std::vector<double> W_sdca(slots, 0.0), alpha_sdca(data.n, 0.0);
    options.num_inner_iterations = 2000;
    rows.Solve(options, W_sdca.data(), alpha_sdca.data());
    const ObjectiveParts q = rows.Evaluate(options, W_sdca.data(),
                                           alpha_sdca.data(), 1,
                                           StdThreadParallelFor(1));
    const double primal_sdca = q.primal_loss +
                               0.5 * options.l2 * q.l2_norm_sq +
                               options.l1 * q.l1_norm;
    if (!(std::fabs(primal - primal_sdca) <= 1e-9 * primal_sdca)) {
      Fail(std::string(loss->Name()) + ": ASDCA's primal differs from "
           "SDCA's");
    }
  }
}

void CheckLosses() {
  std::string error;
  for (LossType type : {LossType::kHinge, LossType::kAbsolute,
                        LossType::kPoisson}) {
    auto loss = MakeLossUpdater(type, 1.0);
    error.clear();
    if (AsdcaSupportsLoss(*loss, &error) ||
        error.find(loss->Name()) == std::string::npos ||
        error.find("smooth_hinge_loss") == std::string::npos) {
      Fail(std::string("not refused with a clear message: ") + loss->Name());
    }
  }
  for (LossType type :
       {LossType::kLogistic, LossType::kSquared, LossType::kSmoothHinge}) {
    if (!AsdcaSupportsLoss(*MakeLossUpdater(type, 1.0), &error)) Fail(error);
  }
}

}  // namespace

int main() {
  CheckLosses();
  CheckAgainstReference();
  CheckConvergence();
  std::printf("OK\n");
  return 0;
}
