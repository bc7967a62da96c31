// Standalone driver of PackedRows filled in pieces (Reserve, then Append of
// consecutive chunks of rows: how tf-sdca train packs a data set read from
// its cache chunk by chunk). For 1, 2 and 3 threads, with and without
// explicit values, it packs one data set at once (Pack) and in chunks of
// 1, 7, 1000 and n - 1 rows and of random sizes (several not dividing n),
// and checks that every packing gives the same rows: the same hot ids and
// slot scales, and bit for bit the same weights, duals and objective after
// three epochs (one thread: Solve; more: SolveLockstep, which visits the
// threads' rows in a fixed interleaving). The rows have ids repeated inside
// a row, empty rows, frequent ("hot") and rare ids, and dense columns with
// zeros. Then it checks that Append refuses what does not fit the reserved
// shape (too many rows or ids, too few ids at the end, values where none
// were reserved) and leaves the rows as they were. Prints "OK" and exits 0
// on success.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"

namespace {

using namespace tf_sdca;  // NOLINT

constexpr int64_t kRows = 5003, kVocab = 4000, kDense = 4;

void Fail(const std::string& what) {
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  std::exit(1);
}

struct Rows {
  std::vector<int64_t> row_ptr{0};
  std::vector<int32_t> ids;
  std::vector<float> values, dense, weights;
  std::vector<double> labels, norms;

  Rows() {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int64_t i = 0; i < kRows; ++i) {
      // 0-9 entries: ids 0-19 in most rows (hot), the rest rare (cold);
      // every 13th row repeats its first id.
      const int64_t nnz = static_cast<int64_t>(rng() % 10);
      for (int64_t k = 0; k < nnz; ++k) {
        const bool frequent = u(rng) < 0.5;
        ids.push_back(static_cast<int32_t>(
            frequent ? rng() % 20 : 20 + rng() % (kVocab - 20)));
        values.push_back(static_cast<float>(u(rng) * 2.0 - 0.5));
      }
      if (nnz > 0 && i % 13 == 0) {
        ids.push_back(ids[row_ptr.back()]);
        values.push_back(0.25f);
      }
      row_ptr.push_back(static_cast<int64_t>(ids.size()));
      dense.push_back(1.0f);
      for (int64_t c = 1; c < kDense; ++c) {
        dense.push_back(u(rng) < 0.3 ? 0.0f : static_cast<float>(u(rng)));
      }
      weights.push_back(static_cast<float>(0.5 + u(rng)));
      labels.push_back(u(rng) < 0.4 ? 1.0 : -1.0);
    }
    norms.resize(kRows);
  }

  // Rows [begin, end) as a data set of their own (row_ptr from 0).
  ResidentData Slice(int64_t begin, int64_t end, bool with_values,
                     std::vector<int64_t>* ptr) const {
    ptr->clear();
    for (int64_t i = begin; i <= end; ++i) {
      ptr->push_back(row_ptr[i] - row_ptr[begin]);
    }
    ResidentData d;
    d.num_examples = end - begin;
    d.num_sparse_features = kVocab;
    d.row_ptr = ptr->data();
    d.ids = ids.data() + row_ptr[begin];
    d.values = with_values ? values.data() + row_ptr[begin] : nullptr;
    d.dense = dense.data() + begin * kDense;
    d.dense_dim = kDense;
    d.labels = labels.data() + begin;
    d.example_weights = weights.data() + begin;
    d.squared_norms = norms.data() + begin;
    return d;
  }
};

struct Result {
  std::vector<int32_t> hot_ids;
  std::vector<double> slot_scales, weights, duals, objective;
};

Result Train(const PackedRows& rows) {
  const auto loss = MakeLossUpdater(LossType::kLogistic, 1.0);
  SolverOptions options;
  options.loss = loss.get();
  options.l1 = 0.01;
  options.l2 = 0.5;
  Result r{rows.hot_ids(), rows.slot_scales(),
           std::vector<double>(rows.num_slots(), 0.0),
           std::vector<double>(rows.num_examples(), 0.0), {}};
  for (int epoch = 0; epoch < 3; ++epoch) {
    options.seed = static_cast<uint64_t>(epoch);
    if (rows.num_threads() == 1) {
      rows.Solve(options, r.weights.data(), r.duals.data());
    } else {
      rows.SolveLockstep(options, r.weights.data(), r.duals.data());
    }
  }
  const ObjectiveParts parts = rows.Evaluate(
      options, r.weights.data(), r.duals.data(), 1, StdThreadParallelFor(1));
  r.objective = {parts.primal_loss, parts.dual_loss, parts.l2_norm_sq,
                 parts.l1_norm};
  return r;
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

PackedRows::Shape ShapeOf(const Rows& data, bool with_values) {
  PackedRows::Shape shape;
  shape.num_examples = kRows;
  shape.num_sparse_features = kVocab;
  shape.num_ids = data.row_ptr.back();
  shape.dense_dim = kDense;
  shape.has_values = with_values;
  return shape;
}

void CheckChunkedPackingEqualsPacking(const Rows& data) {
  std::vector<int64_t> ptr;
  std::mt19937_64 rng(9);
  for (const bool with_values : {false, true}) {
    for (const int threads : {1, 2, 3}) {
      std::string error;
      PackedRows whole;
      if (!whole.Pack(data.Slice(0, kRows, with_values, &ptr), threads, 2,
                      StdThreadParallelFor(2), &error)) {
        Fail(error);
      }
      const Result expected = Train(whole);
      if (threads > 1 && expected.hot_ids.empty()) Fail("no hot ids");
      for (const int64_t size : {int64_t{1}, int64_t{7}, int64_t{1000},
                                 kRows - 1, int64_t{0}}) {
        PackedRows rows;
        if (!rows.Reserve(ShapeOf(data, with_values), threads, &error)) {
          Fail(error);
        }
        for (int64_t begin = 0; begin < kRows;) {
          // size 0: random sizes from 0 (an empty chunk) to 700 rows.
          const int64_t end =
              std::min<int64_t>(kRows, begin + (size > 0 ? size : rng() % 701));
          if (rows.complete()) Fail("complete before the last row");
          if (!rows.Append(data.Slice(begin, end, with_values, &ptr),
                           begin % 3 + 1, StdThreadParallelFor(2), &error)) {
            Fail(error);
          }
          begin = end;
        }
        if (!rows.complete()) Fail("not complete after the last row");
        const Result got = Train(rows);
        const std::string what = "chunks of " + std::to_string(size) +
                                 " rows, " + std::to_string(threads) +
                                 " threads, values " +
                                 std::to_string(with_values) + ": ";
        if (got.hot_ids != expected.hot_ids) Fail(what + "hot ids differ");
        if (!SameBits(got.slot_scales, expected.slot_scales)) {
          Fail(what + "slot scales differ");
        }
        if (!SameBits(got.weights, expected.weights) ||
            !SameBits(got.duals, expected.duals) ||
            !SameBits(got.objective, expected.objective)) {
          Fail(what + "training differs from the rows packed at once");
        }
      }
    }
  }
}

void ExpectAppendFails(PackedRows* rows, const ResidentData& d,
                       const std::string& expected) {
  const int64_t before = rows->num_appended();
  std::string error;
  if (rows->Append(d, 1, StdThreadParallelFor(1), &error)) {
    Fail("Append accepted rows that should fail with: " + expected);
  }
  if (error.find(expected) == std::string::npos) {
    Fail("error \"" + error + "\" lacks \"" + expected + "\"");
  }
  if (rows->num_appended() != before) Fail("a failed Append added rows");
}

void CheckAppendRefusesWhatDoesNotFit(const Rows& data) {
  std::vector<int64_t> ptr;
  std::string error;
  PackedRows rows;
  PackedRows::Shape shape = ShapeOf(data, false);
  shape.num_examples = 10;
  shape.num_ids = data.row_ptr[10];
  if (!rows.Reserve(shape, 2, &error)) Fail(error);
  ExpectAppendFails(&rows, data.Slice(0, 11, false, &ptr),
                    "11 rows cannot follow the 0 appended: num_examples = 10 "
                    "were reserved");
  ExpectAppendFails(&rows, data.Slice(0, 4, true, &ptr), "have values");
  if (!rows.Append(data.Slice(0, 4, false, &ptr), 1, StdThreadParallelFor(1),
                   &error)) {
    Fail(error);
  }
  ResidentData more = data.Slice(4, 10, false, &ptr);
  std::vector<int64_t> longer = ptr;
  longer.back() += 1;  // one id past the reserved ones
  more.row_ptr = longer.data();
  ExpectAppendFails(&rows, more, "were reserved");
  if (!rows.Append(data.Slice(4, 10, false, &ptr), 1, StdThreadParallelFor(1),
                   &error)) {
    Fail(error);
  }
  if (!rows.complete()) Fail("10 reserved rows appended but not complete");
  ExpectAppendFails(&rows, data.Slice(10, 11, false, &ptr),
                    "1 rows cannot follow the 10 appended");
  // The last rows with fewer ids than reserved (a truncated chunk).
  PackedRows fewer;
  shape.num_ids += 1;
  if (!fewer.Reserve(shape, 1, &error)) Fail(error);
  ExpectAppendFails(&fewer, data.Slice(0, 10, false, &ptr),
                    "the last rows bring the sparse entries to " +
                        std::to_string(shape.num_ids - 1) +
                        ", not the num_ids = " +
                        std::to_string(shape.num_ids) + " reserved");
}

}  // namespace

int main() {
  Rows data;
  std::vector<int64_t> ptr;
  std::string error;
  if (!PrepareResidentRows(data.Slice(0, kRows, true, &ptr), 0, kRows,
                           data.norms.data(), &error)) {
    Fail(error);
  }
  CheckChunkedPackingEqualsPacking(data);
  // The norms above count the values; the checks without values reuse them
  // (any norms do: packing copies them).
  CheckAppendRefusesWhatDoesNotFit(data);
  std::printf("OK\n");
  return 0;
}
