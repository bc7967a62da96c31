// Speed and thread scaling of the SDCA engine (kernels/core/packed_rows.h)
// on generated Criteo-shaped rows, without TensorFlow.
//
//   g++ -O3 -std=c++17 -pthread -I. kernels/core/*.cc
//       kernels/tests/packed_rows_bench_main.cc -o /tmp/packed_rows_bench
//   /tmp/packed_rows_bench [rows=1000000] [epochs=10] [threads=1,2,4,8,16]
//                          [threads | lockstep | record] [auto | scaled | fresh]
//                          [tolerance=0] [momentum=0] [l2=1]
//
// Rows: 26 categorical fields with Zipf-distributed values hashed into 2^20
// buckets, 13 uniform counts in [0, 1] and an intercept; labels drawn from a
// logistic ground truth. Logistic loss, l2 = 1 (or the last argument: with
// 26 ids, 13 counts in [0, 1] and an intercept, |x_i|^2 ~ 31, so q_i =
// |x_i|^2 / l2 ~ 31 at l2 = 1 and ~0.3 at l2 = 100). For each thread count it
// trains `epochs` epochs from zero through PackedRows packed for that many
// threads (lock-free threads over split records) and prints the seconds per
// epoch, rows/s, the relative duality gap after each epoch, and how far the
// weights are from w(alpha) = sum_i s_i alpha_i x_i / l2 (relative; ~1e-15
// means no update was lost), so that the speed of more threads can be
// weighed against their slower convergence per epoch. `lockstep` interleaves
// the threads' rows one at a time on one core (PackedRows::SolveLockstep):
// the convergence of T truly parallel threads on a machine with fewer cores
// (its times are one core's). `record` solves on one thread as
// TfSdca>Optimizer does (a StateRecord: duals rounded to float32, the rows'
// losses recorded), to weigh what that costs against the plain pass (the
// thread counts are ignored). The last argument picks how the threads'
// private copies keep up (PackedRows::ThreadSync, default auto). With a
// tolerance > 0 a thread count stops after the first epoch whose relative
// gap is at most that (kernels/tests/run_thread_scaling.sh: epochs and
// seconds to 1e-4). A momentum beta in (0, 1) extrapolates each epoch's
// start from the last two epochs' points as InMemorySdca(momentum=beta)
// does (beta capped to keep every dual in (0, 1) x label, restarted after an
// epoch whose dual objective fell; the weights rebuilt as W(alpha)).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/random.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"

namespace {

using tf_sdca::Rng;

struct Data {
  int64_t n = 0;
  int64_t buckets = int64_t{1} << 20;
  std::vector<int64_t> row_ptr;
  std::vector<int32_t> ids;
  std::vector<float> dense;
  std::vector<float> raw_labels;
  std::vector<double> labels;
  std::vector<float> weights;
  std::vector<double> norms;
};

// Zipf(1.1)-like rank in [0, cardinality) by inverting a continuous power law.
int64_t ZipfRank(Rng* rng, int64_t cardinality) {
  const double s = 1.1;
  const double u = rng->Uniform();
  const double top = std::pow(static_cast<double>(cardinality), 1.0 - s);
  const double r = std::pow(1.0 + u * (top - 1.0), 1.0 / (1.0 - s));
  return std::min<int64_t>(static_cast<int64_t>(r) - 1, cardinality - 1);
}

Data Generate(int64_t n) {
  constexpr int kFields = 26, kCounts = 13;
  const int64_t cardinality[kFields] = {
      1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145,
      5683, 8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4,
      7046547, 18, 15, 286181, 105, 142572};
  Data d;
  d.n = n;
  Rng rng(42);
  std::vector<double> truth(d.buckets);
  for (double& t : truth) t = (rng.Uniform() - 0.5) * 1.5;
  d.row_ptr.resize(n + 1);
  d.ids.resize(n * kFields);
  d.dense.resize(n * (kCounts + 1));
  d.raw_labels.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    d.row_ptr[i] = i * kFields;
    double z = -1.2;
    for (int f = 0; f < kFields; ++f) {
      const uint64_t value = static_cast<uint64_t>(ZipfRank(&rng, cardinality[f]));
      uint64_t h = tf_sdca::MixSeed(value, static_cast<uint64_t>(f));
      const int32_t id = static_cast<int32_t>(h % d.buckets);
      d.ids[i * kFields + f] = id;
      z += 0.3 * truth[id];
    }
    for (int c = 0; c < kCounts; ++c) {
      const float x = static_cast<float>(rng.Uniform());
      d.dense[i * (kCounts + 1) + c] = x;
      z += (c % 2 ? 0.5 : -0.5) * x;
    }
    d.dense[i * (kCounts + 1) + kCounts] = 1.0f;
    d.raw_labels[i] = rng.Uniform() < 1.0 / (1.0 + std::exp(-z)) ? 1.0f : 0.0f;
  }
  d.row_ptr[n] = n * kFields;
  d.labels.resize(n);
  for (int64_t i = 0; i < n; ++i) d.labels[i] = 2.0 * d.raw_labels[i] - 1.0;
  d.weights.assign(n, 1.0f);
  d.norms.resize(n);
  return d;
}

std::vector<int> ParseList(const char* text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

// |w - w(alpha)| / |w(alpha)|, w(alpha) = sum_i s_i alpha_i x_i / l2.
double Drift(const tf_sdca::ResidentData& d, const std::vector<double>& w,
             const std::vector<double>& duals, double l2) {
  std::vector<double> rebuilt(w.size(), 0.0);
  for (int64_t i = 0; i < d.num_examples; ++i) {
    const double c = d.example_weights[i] * duals[i] / l2;
    for (int64_t k = d.row_ptr[i]; k < d.row_ptr[i + 1]; ++k) {
      rebuilt[d.ids[k]] += c;
    }
    for (int64_t j = 0; j < d.dense_dim; ++j) {
      rebuilt[d.num_sparse_features + j] += c * d.dense[i * d.dense_dim + j];
    }
  }
  double diff = 0.0, norm = 0.0;
  for (size_t j = 0; j < w.size(); ++j) {
    diff += (w[j] - rebuilt[j]) * (w[j] - rebuilt[j]);
    norm += rebuilt[j] * rebuilt[j];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// W(alpha) = sum_i s_i alpha_i x_i / l2 into `w`.
void RebuildWeights(const tf_sdca::ResidentData& d,
                    const std::vector<double>& duals, double l2,
                    std::vector<double>* w) {
  std::fill(w->begin(), w->end(), 0.0);
  for (int64_t i = 0; i < d.num_examples; ++i) {
    const double c = d.example_weights[i] * duals[i] / l2;
    for (int64_t k = d.row_ptr[i]; k < d.row_ptr[i + 1]; ++k) {
      (*w)[d.ids[k]] += c;
    }
    for (int64_t j = 0; j < d.dense_dim; ++j) {
      (*w)[d.num_sparse_features + j] += c * d.dense[i * d.dense_dim + j];
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1000000;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 10;
  const std::vector<int> thread_counts =
      ParseList(argc > 3 ? argv[3] : "1,2,4,8,16");
  Data d = Generate(rows);
  tf_sdca::ResidentData view;
  view.num_examples = d.n;
  view.num_sparse_features = d.buckets;
  view.row_ptr = d.row_ptr.data();
  view.ids = d.ids.data();
  view.dense = d.dense.data();
  view.dense_dim = 14;
  view.labels = d.labels.data();
  view.example_weights = d.weights.data();
  std::string error;
  if (!tf_sdca::PrepareResidentRows(view, 0, d.n, d.norms.data(), &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  view.squared_norms = d.norms.data();
  auto loss = tf_sdca::MakeLossUpdater(tf_sdca::LossType::kLogistic, 1.0);
  const double l2 = argc > 8 ? std::atof(argv[8]) : 1.0;
  if (!(l2 > 0.0)) {
    std::fprintf(stderr, "l2 must be > 0\n");
    return 1;
  }
  std::printf("rows %lld, 26 sparse + 14 dense per row, 2^20 buckets, "
              "logistic, l2 = %g, hardware threads %u\n",
              static_cast<long long>(rows), l2,
              std::thread::hardware_concurrency());
  const std::string mode = argc > 4 ? argv[4] : "";
  const bool lockstep = mode == "lockstep";
  const bool record = mode == "record";
  const std::string sync = argc > 5 ? argv[5] : "auto";
  const double tolerance = argc > 6 ? std::atof(argv[6]) : 0.0;
  const double momentum = argc > 7 ? std::atof(argv[7]) : 0.0;
  if (!(momentum >= 0.0 && momentum < 1.0)) {
    std::fprintf(stderr, "momentum must be in [0, 1)\n");
    return 1;
  }
  if (sync != "auto" && sync != "scaled" && sync != "fresh") {
    std::fprintf(stderr, "sync must be auto, scaled or fresh, not %s\n",
                 sync.c_str());
    return 1;
  }
  std::printf("threads epoch   seconds     rows/s   rel.gap  w drift%s\n",
              record ? "  (float32 duals, losses recorded)" : "");
  for (const int threads : thread_counts) {
    tf_sdca::PackedRows rows_packed;
    using Sync = tf_sdca::PackedRows::ThreadSync;
    rows_packed.set_thread_sync(sync == "fresh"    ? Sync::kFresh
                                : sync == "scaled" ? Sync::kScaled
                                                   : Sync::kAuto);
    if (!rows_packed.Pack(view, record ? 1 : threads, 2,
                          tf_sdca::StdThreadParallelFor(2), &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    tf_sdca::SolverOptions options;
    options.loss = loss.get();
    options.l2 = l2;
    std::vector<double> w(view.num_slots(), 0.0), duals(d.n, 0.0);
    std::vector<double> primal(d.n), dual_losses(d.n);
    tf_sdca::StateRecord state;
    state.primal_losses = primal.data();
    state.dual_losses = dual_losses.data();
    double total = 0.0;
    int epochs_run = 0;
    // momentum: the last epoch's own duals, the one's before, and whether
    // the next epoch restarts (the dual objective fell).
    std::vector<double> own, before;
    double last_dual = -INFINITY;
    bool restart = false;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      options.seed = static_cast<uint64_t>(epoch);
      if (momentum > 0.0) {
        before.swap(own);
        own = duals;
        if (!before.empty() && !restart) {
          // The largest step keeping every b = alpha y in [0, 1].
          double limit = INFINITY;
          for (int64_t i = 0; i < d.n; ++i) {
            const double b = own[i] * d.labels[i];
            const double db = (own[i] - before[i]) * d.labels[i];
            if (db > 0.0) limit = std::min(limit, (1.0 - b) / db);
            if (db < 0.0) limit = std::min(limit, -b / db);
          }
          const double beta = std::min(momentum, 0.9 * limit);
          for (int64_t i = 0; i < d.n; ++i) {
            duals[i] = own[i] + beta * (own[i] - before[i]);
          }
          RebuildWeights(view, duals, options.l2, &w);
        }
      }
      const auto start = std::chrono::steady_clock::now();
      if (lockstep) {
        rows_packed.SolveLockstep(options, w.data(), duals.data());
      } else {
        rows_packed.Solve(options, w.data(), duals.data(),
                          record ? &state : nullptr);
      }
      const double seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
      total += seconds;
      const tf_sdca::ObjectiveParts parts = rows_packed.Evaluate(
          options, w.data(), duals.data(), std::max(threads, 1),
          tf_sdca::StdThreadParallelFor(std::max(threads, 1)));
      const double primal_value =
          parts.primal_loss + 0.5 * l2 * parts.l2_norm_sq;
      const double gap =
          parts.primal_loss + parts.dual_loss + l2 * parts.l2_norm_sq;
      if (momentum > 0.0) {
        restart = primal_value - gap < last_dual;
        last_dual = primal_value - gap;
      }
      std::printf("%7d %5d %9.3f %10.0f %9.2e  %.1e\n", record ? 1 : threads,
                  epoch + 1, seconds, rows / seconds, gap / primal_value,
                  Drift(view, w, duals, options.l2));
      ++epochs_run;
      if (gap / primal_value <= tolerance) break;
    }
    std::printf("%7d total %9.3f %10.0f (mean rows/s)\n",
                record ? 1 : threads, total, rows * epochs_run / total);
    std::fflush(stdout);
  }
  return 0;
}
