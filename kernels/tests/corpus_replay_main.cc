// Replays the op fuzzer's data calls through the TensorFlow-free core, for
// the sanitizers (tools/fuzz_ops.py --corpus writes them; TensorFlow itself
// is not built with ASan, so the ops' own calls cannot be). Each record is
// the rows of a pack_rows / packed_solve / append_rows call, mutated or
// not:
//   RECORD <loss> <num_classes> <n> <num_sparse_features> <dense_dim>
//   <row_ptr: n + 1 ints>        (each of the six on its own line, possibly
//   <feature_ids: int64s>          empty; values may be nan / inf)
//   <feature_values: floats>
//   <dense_features: n * d floats>
//   <example_weights: floats>
//   <example_labels: floats>
// A record is validated as the ops do (lengths, ValidateRowPtr,
// PrepareResidentRows, weights finite and >= 0, labels through the loss,
// ids within int32) and, when valid, packed and solved for two passes (the
// binary losses by Solve, the multiclass ones by SolveBlocks) and
// evaluated. Prints "records R accepted A refused F" and exits 0; the run
// fails on any sanitizer report.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/multiclass_loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"

namespace {

using namespace tf_sdca;  // NOLINT

template <class T>
std::vector<T> ReadLine(std::istream& in) {
  std::string line;
  std::getline(in, line);
  std::istringstream words(line);
  std::vector<T> out;
  std::string word;
  while (words >> word) {
    if constexpr (std::is_floating_point_v<T>) {
      out.push_back(static_cast<T>(std::strtod(word.c_str(), nullptr)));
    } else {
      out.push_back(static_cast<T>(std::strtoll(word.c_str(), nullptr, 10)));
    }
  }
  return out;
}

// False when the record is not valid input (as the ops would refuse it).
bool Replay(const std::string& loss_name, int64_t k, int64_t n, int64_t vocab,
            int64_t d, const std::vector<int64_t>& row_ptr,
            const std::vector<int64_t>& ids64, const std::vector<float>& values,
            const std::vector<float>& dense,
            const std::vector<float>& weights,
            const std::vector<double>& raw_labels) {
  if (n < 0 || vocab < 0 || d < 0 || k < 1 || k > 1000 ||
      vocab > std::numeric_limits<int32_t>::max() ||
      static_cast<int64_t>(row_ptr.size()) != n + 1 ||
      static_cast<int64_t>(weights.size()) != n ||
      static_cast<int64_t>(raw_labels.size()) != n ||
      static_cast<int64_t>(dense.size()) != n * d ||
      values.size() != ids64.size()) {
    return false;
  }
  std::vector<int32_t> ids;
  for (const int64_t id : ids64) {
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) return false;
    ids.push_back(static_cast<int32_t>(id));
  }
  for (const float s : weights) {
    if (!(std::isfinite(s) && s >= 0)) return false;
  }
  MulticlassLossType mc_type;
  LossType type;
  std::unique_ptr<MulticlassLoss> multiclass;
  std::unique_ptr<DualLossUpdater> loss;
  if (ParseMulticlassLossType(loss_name, &mc_type)) {
    if (k < 2) return false;
    multiclass = MakeMulticlassLoss(mc_type, static_cast<int>(k));
  } else if (ParseLossType(loss_name, &type) && k == 1) {
    loss = MakeLossUpdater(type, 1.0);
  } else {
    return false;
  }
  std::vector<double> labels(n);
  std::string why;
  for (int64_t i = 0; i < n; ++i) {
    if (!(multiclass ? multiclass->ConvertLabel(raw_labels[i], &labels[i], &why)
                     : loss->ConvertLabel(raw_labels[i], &labels[i], &why))) {
      return false;
    }
  }
  ResidentData data;
  data.num_examples = n;
  data.num_sparse_features = vocab;
  data.row_ptr = row_ptr.data();
  data.ids = ids.data();
  data.values = values.data();
  data.dense = dense.data();
  data.dense_dim = d;
  data.labels = labels.data();
  data.example_weights = weights.data();
  std::vector<double> norms(n);
  data.squared_norms = norms.data();
  std::string error;
  if (!ValidateRowPtr(data, static_cast<int64_t>(ids.size()), &error) ||
      !PrepareResidentRows(data, 0, n, norms.data(), &error)) {
    return false;
  }
  PackedRows rows;
  if (!rows.Pack(data, 1, 1, StdThreadParallelFor(1), &error)) return false;
  SolverOptions options;
  options.l2 = 1.0;
  options.num_inner_iterations = 2;
  std::vector<double> w(rows.num_slots() * k, 0.0), duals(n * k, 0.0);
  if (multiclass) {
    rows.SolveBlocks(options, *multiclass, w.data(), duals.data());
    rows.EvaluateBlocks(options, *multiclass, w.data(), duals.data(), 1,
                        StdThreadParallelFor(1));
  } else {
    options.loss = loss.get();
    std::vector<double> primal(n), dual_loss(n);
    StateRecord record;  // as the mini-batch op keeps it
    record.primal_losses = primal.data();
    record.dual_losses = dual_loss.data();
    rows.Solve(options, w.data(), duals.data(), &record);
    if (!record.error.empty()) return true;  // refused by the step: named
    rows.Evaluate(options, w.data(), duals.data(), 1,
                  StdThreadParallelFor(1));
  }
  return true;
}

}  // namespace

int main() {
  int64_t records = 0, accepted = 0;
  std::string word;
  while (std::cin >> word) {
    if (word != "RECORD") {
      std::fprintf(stderr, "FAILED: expected RECORD, got %s\n", word.c_str());
      return 1;
    }
    std::string loss;
    int64_t k, n, vocab, d;
    std::cin >> loss >> k >> n >> vocab >> d;
    std::string rest;
    std::getline(std::cin, rest);
    const auto row_ptr = ReadLine<int64_t>(std::cin);
    const auto ids = ReadLine<int64_t>(std::cin);
    const auto values = ReadLine<float>(std::cin);
    const auto dense = ReadLine<float>(std::cin);
    const auto weights = ReadLine<float>(std::cin);
    const auto labels = ReadLine<double>(std::cin);
    ++records;
    if (Replay(loss, k, n, vocab, d, row_ptr, ids, values, dense, weights,
               labels)) {
      ++accepted;
    }
  }
  std::printf("records %lld accepted %lld refused %lld\n",
              static_cast<long long>(records),
              static_cast<long long>(accepted),
              static_cast<long long>(records - accepted));
  return 0;
}
