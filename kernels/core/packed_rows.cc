#include "kernels/core/packed_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "kernels/core/first_bad_block.h"
#include "kernels/core/random.h"
#include "kernels/core/row_step.h"
#include "kernels/core/visit_order.h"

namespace tf_sdca {

namespace {

using row_step::Dispatch;
using row_step::PrefetchAhead;
using row_step::RowStep;
using row_step::WithPartitionScaling;

constexpr double kFreshMissedChanges = 8.0;

template <typename T>
std::string Describe(const char* name, int64_t at, T value, const char* why) {
  std::ostringstream out;
  out << name << "[" << at << "] = " << value << " " << why;
  return out.str();
}

// The ids a row has seen, hashed to one bit each of 2^14 (2 KiB, in L1
// cache): a row whose ids set no bit twice has no repeated id (a repeated
// id sets its bit twice). Rows of 40 hashed ids collide in ~5% of rows
// (40 * 39 / 2 pairs over 2^14 bits), which then compare every pair.
class IdFilter {
 public:
  // Whether ids[begin, end) set distinct bits; clears them again.
  bool AllDistinctBits(const int32_t* ids, int64_t begin, int64_t end) {
    uint64_t twice = 0;
    for (int64_t k = begin; k < end; ++k) {
      const uint32_t bit = Bit(ids[k]);
      const uint64_t mask = uint64_t{1} << (bit & 63);
      uint64_t& word = bits_[bit >> 6];
      twice |= word & mask;
      word |= mask;
    }
    for (int64_t k = begin; k < end; ++k) bits_[Bit(ids[k]) >> 6] = 0;
    return twice == 0;
  }

 private:
  static constexpr int kBits = 14;
  // Fibonacci hashing: the top kBits bits of id * 2^32 / phi.
  static uint32_t Bit(int32_t id) {
    return (static_cast<uint32_t>(id) * 0x9E3779B1u) >> (32 - kBits);
  }
  uint64_t bits_[(1 << kBits) / 64] = {};
};

// True when ids[begin, end) has no repeated id. Strictly increasing rows
// are checked in one scan; other short rows (hashed ids come unsorted)
// through `filter`, and where two of their ids share its bit by comparing
// every pair, which for a Criteo row of 26 ids is far cheaper than sorting
// a copy (the filter alone halves the check of 40-entry rows: 66 against
// 132 ns a row, the most of packing them).
bool DistinctIds(const int32_t* ids, int64_t begin, int64_t end,
                 IdFilter* filter) {
  bool increasing = true;
  for (int64_t k = begin + 1; k < end && increasing; ++k) {
    increasing = ids[k] > ids[k - 1];
  }
  if (increasing) return true;
  constexpr int64_t kPairwiseLimit = 64;
  if (end - begin > kPairwiseLimit) return false;  // let the caller sort
  if (filter->AllDistinctBits(ids, begin, end)) return true;
  // Branch-free inner loop (the compiler vectorises it).
  int repeated = 0;
  for (int64_t a = begin + 1; a < end; ++a) {
    const int32_t id = ids[a];
    for (int64_t b = begin; b < a; ++b) repeated |= ids[b] == id;
  }
  return repeated == 0;
}

// Sum of squares of one row's sparse part, merging repeated ids (a repeated
// id means the sum of its values). Rows without repeats, the common case,
// need no merging.
double SparseSquaredNorm(const ResidentData& d, int64_t i, IdFilter* filter) {
  const int64_t begin = d.row_ptr[i], end = d.row_ptr[i + 1];
  if (DistinctIds(d.ids, begin, end, filter)) {
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

// A 'shrinking' pass's thresholds (PackedRows::ShrinkingState) and what it
// measures: See() takes each visited row's step, before it moved the dual.
struct ShrinkingPass {
  uint8_t* shrunk;  // [n], by row
  double high, low;
  double max_gradient = -std::numeric_limits<double>::infinity();
  double min_gradient = std::numeric_limits<double>::infinity();

  void See(const DualLossUpdater& loss, double label, double dual_before,
           double wx, int64_t row) {
    double g;
    int bound;
    if (!loss.DualBoxGradient(label, dual_before, wx, &g, &bound)) return;
    // The projected gradient; a row at a bound that the gradient pushes out
    // by more than the last pass's extreme projected gradient is shrunk
    // (its step, clipped to the bound, did not move it).
    double projected = g;
    if (bound < 0) {
      if (g > high) {
        shrunk[row] = 1;
        return;
      }
      projected = std::min(g, 0.0);
    } else if (bound > 0) {
      if (g < low) {
        shrunk[row] = 1;
        return;
      }
      projected = std::max(g, 0.0);
    }
    max_gradient = std::max(max_gradient, projected);
    min_gradient = std::min(min_gradient, projected);
  }
};

// One pass over packed records (PackedRows) on one thread, visiting the
// records at byte offsets visit[0..count) of `buffer`.
//
// kRecord is TfSdca>Optimizer's pass (PackedRows::Solve with a StateRecord):
// new duals rounded to float32 (RowStep::Update), the margin each visited
// row's step saw written to margins[row] (its primal loss is computed once
// after the passes: in the loop it cost ~5% of the op's solve), and a stop
// at the first step whose float32 dual or weight change is not finite. Run
// returns that visit's k (and its margin in *failed_margin), or -1.
template <class Loss, bool kHasL1, bool kHasValues>
class PackedPass {
 public:
  // `lines`: the cache lines of a record to prefetch (PrefetchLines());
  // `prefetch_weights`: whether to prefetch the weights of a row's ids too
  // (PrefetchWeights).
  PackedPass(const Loss& loss, const SolverOptions& options, double sigma,
             int64_t lines, bool prefetch_weights)
      : loss_(loss), options_(options), step_(loss, options, sigma),
        lines_(lines), prefetch_weights_(prefetch_weights) {}

  // With `shrinking` (kShrinking), each step is also shown to it.
  template <class Header, bool kRecord>
  int64_t Run(const char* buffer, const int64_t* visit, int64_t count,
              int64_t dd, int64_t num_sparse, double* __restrict w,
              double* __restrict duals, double* __restrict margins,
              double* failed_margin,
              ShrinkingPass* shrinking = nullptr) const {
    double* __restrict wd = w + num_sparse;
    const double* prefetch_w = prefetch_weights_ ? w : nullptr;
    for (int64_t k = 0; k < count; ++k) {
      // A pass of millions of rows takes seconds: a cancelled step stops
      // within kCancelCheckRows of them (the caller sees Cancelled() too).
      if ((k & (kCancelCheckRows - 1)) == kCancelCheckRows - 1 &&
          options_.Cancelled()) {
        return -1;
      }
      PrefetchAhead<Header>(buffer, visit, k, count, lines_, prefetch_w,
                            duals, [](const Header* h) { return h->nnz; });
      const Header* h = reinterpret_cast<const Header*>(buffer + visit[k]);
      const double s = h->weight;
      if (s <= 0.0) continue;
      const int64_t nnz = h->nnz;
      const PackedRows::Entries entries = PackedRows::EntriesOf(
          reinterpret_cast<const char*>(h), kHasValues);
      double wx;
      const double dual_before = duals[h->row];
      const double coef = step_.template Take<kRecord>(
          entries.ids, entries.values, entries.units, nnz, entries.dense, dd,
          h->label, s, h->norm, duals + h->row, w, wd, &wx);
      if (shrinking != nullptr) {
        shrinking->See(loss_, h->label, dual_before, wx, h->row);
      }
      if (kRecord) {
        margins[h->row] = wx;
        if (std::isnan(coef)) {
          *failed_margin = wx;
          return k;
        }
      }
    }
    return -1;
  }

 private:
  const Loss& loss_;
  const SolverOptions& options_;
  const RowStep<Loss, kHasL1, kHasValues> step_;
  const int64_t lines_;
  const bool prefetch_weights_;
};

// Rows per block of the objective's sums.
constexpr int64_t kSumRows = 16384;

// Runs row_losses(begin, end, &primal, &dual) over blocks of kSumRows rows
// of [0, n), on `threads` pieces of whole blocks, and adds the blocks' sums
// to *parts in the blocks' order: the same bits whatever `threads` is (the
// machine's cores, or 1 beside a training thread).
template <class Body>
void SumLosses(int64_t n, int64_t threads, const ParallelFor& parallel_for,
               const Body& row_losses, ObjectiveParts* parts) {
  const int64_t blocks = std::max<int64_t>(1, (n + kSumRows - 1) / kSumRows);
  threads = std::max<int64_t>(1, std::min(threads, blocks));
  std::vector<double> primal(blocks, 0.0), dual(blocks, 0.0);
  parallel_for(threads, [&](int64_t t) {
    for (int64_t b = blocks * t / threads; b < blocks * (t + 1) / threads;
         ++b) {
      row_losses(std::min(n, b * kSumRows), std::min(n, (b + 1) * kSumRows),
                 &primal[b], &dual[b]);
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    parts->primal_loss += primal[b];
    parts->dual_loss += dual[b];
  }
}

// Adds |shrink(w)|^2 and |shrink(w)|_1 of weights[0, m) to *parts, in
// order. Without L1, shrink(w) = ShrinkL1(w, 0) is w but for -0 -> +0 (the
// same squares and absolute values): its branches, mispredicted on the
// zeros of a sparse model, took most of an evaluation of 2,000 text rows.
void AddNorms(const double* weights, int64_t m, double shrinkage,
              ObjectiveParts* parts) {
  double l2 = parts->l2_norm_sq, l1 = parts->l1_norm;
  if (shrinkage == 0.0) {
    for (int64_t j = 0; j < m; ++j) {
      const double v = weights[j];
      l2 += v * v;
      l1 += std::fabs(v);
    }
  } else {
    for (int64_t j = 0; j < m; ++j) {
      const double v = ShrinkL1(weights[j], shrinkage);
      l2 += v * v;
      l1 += std::fabs(v);
    }
  }
  parts->l2_norm_sq = l2;
  parts->l1_norm = l1;
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
    const int64_t lo = d.row_ptr[begin];
    const int64_t hi = d.row_ptr[end];
    const uint64_t limit = static_cast<uint64_t>(d.num_sparse_features);
    const int64_t ids_from = FirstBadBlock(lo, hi, [&](int64_t k) {
      // (A negative id is a huge unsigned one.)
      return static_cast<uint64_t>(static_cast<int64_t>(d.ids[k])) >= limit;
    });
    for (int64_t k = ids_from; k < hi; ++k) {
      if (d.ids[k] < 0 || d.ids[k] >= d.num_sparse_features) {
        std::ostringstream out;
        out << "feature_ids[" << k << "] = " << d.ids[k] << " is outside [0, "
            << d.num_sparse_features << ") (the sparse rows of weights)";
        *error = out.str();
        return false;
      }
    }
    if (d.values != nullptr) {
      const int64_t k = lo + FirstNonFinite(d.values + lo, hi - lo);
      if (k < hi) {
        *error = Describe("feature_values", k, d.values[k], "must be finite");
        return false;
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
  IdFilter filter;
  for (int64_t i = begin; i < end; ++i) {
    double sq = d.row_ptr != nullptr ? SparseSquaredNorm(d, i, &filter) : 0.0;
    const float* x = d.dense + i * d.dense_dim;
    for (int64_t c = 0; c < d.dense_dim; ++c) {
      sq += static_cast<double>(x[c]) * x[c];
    }
    norms[i] = sq;
  }
  return true;
}

int64_t FirstInvalidDual(const double* duals, const double* labels,
                         int64_t n, const DualLossUpdater& loss) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(duals[i]) || !loss.DualInDomain(duals[i], labels[i])) {
      return i;
    }
  }
  return -1;
}

// ------------------------------------------------------------ PackedRows

void PackedRows::FreeBuffer::operator()(char* p) const {
  if (owned) std::free(p);
}

namespace {

// `bytes` of records; on Linux, from 4 MiB, 2 MiB-aligned with 2 MiB pages
// requested (where the kernel's transparent huge pages allow them on
// request): they spare the TLB misses of visiting records in a random
// order. Fewer bytes take 4 KiB pages, whose TLB entries cover them: a
// huge page is zeroed whole when first touched (on 2,000 text rows, 0.8
// MB of records, ~1.3 MB more to clear per fit).
char* AllocateRecords(int64_t bytes) {
  char* memory = nullptr;
#ifdef __linux__
  constexpr int64_t kHugePage = int64_t{1} << 21;
  constexpr int64_t kHugeFrom = int64_t{1} << 22;
  if (bytes >= kHugeFrom) {
    const int64_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    memory = static_cast<char*>(std::aligned_alloc(kHugePage, rounded));
    if (memory != nullptr) madvise(memory, rounded, MADV_HUGEPAGE);
  }
#endif
  if (memory == nullptr) memory = static_cast<char*>(std::malloc(bytes));
  return memory;
}

}  // namespace

RecordArena::RecordArena() = default;

RecordArena::~RecordArena() { std::free(block_); }

char* RecordArena::Take(int64_t bytes) {
  if (bytes <= capacity_) return block_;
  std::free(block_);
  // Some room to grow: batches of a stream differ a little in size.
  const int64_t wanted = bytes + bytes / 8;
  block_ = AllocateRecords(wanted);
  capacity_ = block_ != nullptr ? wanted : 0;
  return block_;
}

int64_t PackedRows::bytes() const {
  return buffer_bytes_ +
         static_cast<int64_t>(offsets_.size() * sizeof(int64_t) +
                              labels_.size() * sizeof(double) +
                              hot_ids_.size() * sizeof(int32_t));
}

int64_t PackedRows::PrefetchLines() const {
  // The most lines a record of the mean size can span (records are not
  // aligned to lines): a Criteo row with explicit values is ~300 bytes, up
  // to 6 lines, and prefetching only its first 4 halved the rows/s of a
  // pass. Capped, because the hardware prefetcher follows a long (dense)
  // record by itself.
  // (Less the values of 1.0 that records with values keep none of.)
  const int64_t mean = (buffer_bytes_ - 4 * units_not_stored_) /
                       std::max<int64_t>(num_examples_, 1);
  return std::clamp<int64_t>((mean + 62) / 64 + 1, 4, 8);
}

// A table of fewer bytes stays in the caches from row to row: prefetching
// the weights of a row's ids three visits ahead then only costs the loop
// over its ids, the loads of a record just arrived (the pass's top
// instructions in perf on 2,000 text-like rows, 2^15 weights of 8 bytes).
// One-thread hinge epochs without it, by table size (those rows' ids spread
// over more slots; 18 epochs, min of 30, load ~3): 0.25 MB 5.38 -> 4.64 ms,
// 1 MB 7.52 -> 7.21, 2 MB 10.35 -> 9.63, 8 MB 23.55 -> 23.69, 32 MB 93.7 ->
// 109.0; the Crammer-Singer table of those rows (2.6 MB) 37.5 -> 36.6 ms.
constexpr int64_t kPrefetchWeightsFrom = int64_t{4} << 20;

const double* PackedRows::PrefetchWeights(const double* weights,
                                          int64_t stride) const {
  return num_slots() * stride * static_cast<int64_t>(sizeof(double)) >=
                 kPrefetchWeightsFrom
             ? weights
             : nullptr;
}

int64_t PackedRows::SyncInterval() const {
  if (thread_sync_ == ThreadSync::kFresh) return kFreshSyncInterval;
  return std::clamp<int64_t>(num_examples_ / (64 * num_threads_), 16, 1024);
}

int64_t PackedRows::FrequentSyncInterval() const {
  return std::clamp<int64_t>(num_examples_ / (1024 * num_threads_), 16,
                             SyncInterval());
}

void PackedRows::ChooseHotIds(std::vector<int64_t>* uses) {
  hot_ids_.clear();
  const int64_t n = num_examples_, m = num_sparse_features_;
  std::vector<int32_t>& count = id_counts_;
  const int64_t threshold = std::max<int64_t>(2, (n + 1023) / 1024);
  for (int64_t j = 0; j < m; ++j) {
    if (count[j] >= threshold) hot_ids_.push_back(static_cast<int32_t>(j));
  }
  // Most frequent first (SplitPass merges the first ones more often).
  auto more_frequent = [&](int32_t a, int32_t b) {
    return count[a] != count[b] ? count[a] > count[b] : a < b;
  };
  if (static_cast<int64_t>(hot_ids_.size()) > kMaxHotIds) {
    std::nth_element(hot_ids_.begin(), hot_ids_.begin() + kMaxHotIds,
                     hot_ids_.end(), more_frequent);
    hot_ids_.resize(kMaxHotIds);
  }
  std::sort(hot_ids_.begin(), hot_ids_.end(), more_frequent);
  uses->clear();
  for (const int32_t id : hot_ids_) uses->push_back(count[id]);
  uses->insert(uses->end(), dense_uses_.begin(), dense_uses_.end());
  // The counts become the hot index of each id (-1: cold).
  std::fill(count.begin(), count.end(), -1);
  for (size_t h = 0; h < hot_ids_.size(); ++h) {
    count[hot_ids_[h]] = static_cast<int32_t>(h);
  }
}

void PackedRows::ChooseSlotScales(const std::vector<int64_t>& uses) {
  const int64_t n = num_examples_, num_hot = hot_ids_.size();
  // In one merge interval of r rows the other T - 1 threads change slot h
  // about (T - 1) r rho_h times (rho_h: the share of rows using it) where
  // this thread's rows expect none. On a slot in every row a thread's own
  // rows already fix the slot's part of the residual within one interval,
  // so T threads together move it T / sigma'_h times as far as needed, and
  // like a gradient step past twice its curvature's inverse the move
  // diverges from T / sigma'_h = 2 on (measured in lockstep: sigma' = T / 2
  // keeps the gap at 1, sigma' = 0.7 T converges). sigma' = T (CoCoA+'s
  // safe value) slows every row whose x is mostly on such slots; T - 1
  // keeps the ratio at T / (T - 1) <= 1.5 for T >= 3 and leaves two threads
  // as they were (ratio 2, stable on the data measured since the slot's
  // own step gains less than the whole residual). Slots used by a fraction
  // of the rows in an interval get a share of it:
  //   sigma'_h = 1 + (T - 2) min(1, r rho_h).
  const double threads = num_threads_;
  slot_scales_.resize(num_hot + dense_dim_);
  for (int64_t h = 0; h < num_hot + dense_dim_; ++h) {
    const bool frequent = h < kFrequentHotIds || h >= num_hot;
    const double interval =
        static_cast<double>(frequent ? FrequentSyncInterval() : SyncInterval());
    const double rho = n > 0 ? static_cast<double>(uses[h]) / n : 0.0;
    slot_scales_[h] = 1.0 + (threads - 2.0) * std::min(1.0, interval * rho);
  }
  merge_ranges_.clear();
  if (thread_sync_ != ThreadSync::kFresh) return;
  std::fill(slot_scales_.begin(), slot_scales_.end(), 1.0);
  // m_h: the largest power of two <= c / ((T - 1) rho_h), in [1, 1024], c =
  // kFreshMissedChanges: a step misses about c of the other threads'
  // changes of the slot (measured in lockstep, 50k rows, 20 epochs: c = 1
  // to 8 end within 1.7x of one thread's gap up to 8 threads, c = 16 at 7x
  // with 3 and 300x with 8; two real threads ran at 0.56x the rows/s with
  // every slot merged at least every 64 rows, 0.89x with 1024). The hot
  // slots come most frequent first, so equal intervals form runs.
  for (int64_t h = 0; h < num_hot + dense_dim_; ++h) {
    const double expected = (threads - 1.0) * uses[h] / std::max<double>(n, 1);
    int64_t every = 1;
    while (every < kFreshSyncInterval && 2.0 * every * expected <= kFreshMissedChanges) {
      every *= 2;
    }
    if (!merge_ranges_.empty() && merge_ranges_.back().end == h &&
        merge_ranges_.back().every == every) {
      merge_ranges_.back().end = h + 1;
    } else {
      merge_ranges_.push_back({h, h + 1, every});
    }
  }
}

bool PackedRows::Pack(const ResidentData& d, int num_threads, int64_t chunks,
                      const ParallelFor& parallel_for, std::string* error) {
  Shape shape;
  shape.num_examples = d.num_examples;
  shape.num_sparse_features = d.num_sparse_features;
  shape.num_ids = d.row_ptr != nullptr ? d.row_ptr[d.num_examples] : 0;
  shape.dense_dim = d.dense_dim;
  shape.has_values = d.values != nullptr;
  return Reserve(shape, num_threads, error) &&
         Append(d, chunks, parallel_for, error);
}

namespace {

// Bytes of a record before padding.
int64_t RecordSize(int64_t header, int64_t per_entry, int64_t nnz,
                   int64_t dense_dim) {
  return header + per_entry * nnz + 4 * dense_dim;
}

// Past the last record: prefetching a few lines beyond it stays inside the
// allocation.
constexpr int64_t kTailBytes = 256;

// The leading entries of values[0, nnz) that are exactly 1.0f (a one-thread
// record stores no value for them).
int64_t LeadingUnits(const float* values, int64_t nnz) {
  int64_t e = 0;
  while (e < nnz && values[e] == 1.0f) ++e;
  return e;
}

}  // namespace

bool PackedRows::Reserve(const Shape& shape, int num_threads,
                         std::string* error) {
  if (shape.num_examples < 0 || shape.num_sparse_features < 0 ||
      shape.num_ids < 0 || shape.dense_dim < 0) {
    std::ostringstream out;
    out << "sizes must be >= 0: num_examples = " << shape.num_examples
        << ", num_sparse_features = " << shape.num_sparse_features
        << ", num_ids = " << shape.num_ids
        << ", dense_dim = " << shape.dense_dim;
    *error = out.str();
    return false;
  }
  const int64_t n = shape.num_examples;
  num_examples_ = n;
  num_sparse_features_ = shape.num_sparse_features;
  num_ids_ = shape.num_ids;
  dense_dim_ = shape.dense_dim;
  has_values_ = shape.has_values;
  num_threads_ = std::max(1, num_threads);
  thread_sync_ = requested_sync_;
  if (thread_sync_ == ThreadSync::kAuto) {
    thread_sync_ = num_threads_ >= 3 ? ThreadSync::kFresh : ThreadSync::kScaled;
  }
  if (num_threads_ == 1) thread_sync_ = ThreadSync::kScaled;
  num_appended_ = ids_appended_ = records_end_ = units_not_stored_ = 0;
  hot_ids_.clear();
  slot_scales_.clear();
  merge_ranges_.clear();
  const bool split = num_threads_ > 1;
  // (No rows: nothing to split; the rows are complete at once.)
  id_counts_.assign(split && n > 0 ? num_sparse_features_ : 0, 0);
  dense_uses_.assign(split && n > 0 ? dense_dim_ : 0, 0);
  offsets_.resize(n);
  labels_.resize(n);
  // Each record's padding to 8 bytes adds at most 4 (its parts are
  // multiples of 4): an upper bound, exact but for those 4 bytes a row.
  const int64_t header = split ? sizeof(SplitHeader) : sizeof(Header);
  // (A one-thread record with values also holds its count of units.)
  const int64_t units = !split && has_values_ ? 4 : 0;
  buffer_bytes_ = n * (RecordSize(header, 0, 0, dense_dim_) + units + 4) +
                  (has_values_ ? 8 : 4) * num_ids_ + kTailBytes;
  buffer_.reset();  // before an arena's block may be handed out again
  char* memory = arena_ != nullptr ? arena_->Take(buffer_bytes_)
                                   : AllocateRecords(buffer_bytes_);
  if (memory == nullptr) {
    *error = "out of memory packing " + std::to_string(buffer_bytes_) +
             " bytes of rows";
    return false;
  }
  buffer_ = std::unique_ptr<char[], FreeBuffer>(
      memory, FreeBuffer(/*owned=*/arena_ == nullptr));
  if (n == 0) std::memset(buffer_.get(), 0, kTailBytes);
  return true;
}

bool PackedRows::Append(const ResidentData& d, int64_t chunks,
                        const ParallelFor& parallel_for, std::string* error) {
  const int64_t n = d.num_examples, first_row = num_appended_;
  const int64_t num_ids = d.row_ptr != nullptr ? d.row_ptr[n] : 0;
  std::ostringstream out;
  if (n > num_examples_ - first_row) {
    out << n << " rows cannot follow the " << first_row << " appended: "
        << "num_examples = " << num_examples_ << " were reserved";
  } else if (num_ids > num_ids_ - ids_appended_) {
    out << "the rows' " << num_ids << " sparse entries cannot follow the "
        << ids_appended_ << " appended: num_ids = " << num_ids_
        << " were reserved";
  } else if (first_row + n == num_examples_ &&
             ids_appended_ + num_ids != num_ids_) {
    out << "the last rows bring the sparse entries to "
        << ids_appended_ + num_ids << ", not the num_ids = " << num_ids_
        << " reserved";
  } else if (d.num_sparse_features != num_sparse_features_ ||
             d.dense_dim != dense_dim_) {
    out << "the rows have " << d.num_sparse_features << " sparse features and "
        << d.dense_dim << " dense columns; num_sparse_features = "
        << num_sparse_features_ << " and dense_dim = " << dense_dim_
        << " were reserved";
  } else if (num_ids > 0 && (d.values != nullptr) != has_values_) {
    out << "the rows' sparse entries " << (has_values_ ? "lack" : "have")
        << " values; the reserved rows (has_values = "
        << (has_values_ ? "true" : "false") << ") "
        << (has_values_ ? "have" : "lack") << " them";
  }
  const bool split = num_threads_ > 1;
  const int64_t per_entry = has_values_ ? 8 : 4;
  const int64_t header = split ? sizeof(SplitHeader) : sizeof(Header);
  // One thread with values: the units' count, and no value for them.
  const bool units = !split && has_values_;
  int64_t end = records_end_;
  int64_t units_not_stored = units_not_stored_;
  // Whether `out` holds an error, kept in a flag: out.tellp() per row (a
  // virtual seekoff through the stream buffer) was 0.8% of a streaming
  // minimize call's samples (2026-11-29, 50k Criteo-shaped rows, 'auto').
  bool failed = out.tellp() != 0;
  for (int64_t i = 0; i < n && !failed; ++i) {
    const int64_t nnz = d.row_ptr ? d.row_ptr[i + 1] - d.row_ptr[i] : 0;
    if (nnz > std::numeric_limits<int32_t>::max()) {
      out << "row " << first_row + i << " has " << nnz
          << " sparse entries, more than 2^31 - 1";
      failed = true;
    }
    offsets_[first_row + i] = end;
    const int64_t leading =
        units && nnz > 0 ? LeadingUnits(d.values + d.row_ptr[i], nnz) : 0;
    units_not_stored += leading;
    const int64_t bytes =
        units ? RecordSize(header + 4, per_entry, nnz, dense_dim_) -
                    4 * leading
              : RecordSize(header, per_entry, nnz, dense_dim_);
    end += (bytes + 7) & ~int64_t{7};
  }
  if (failed) {
    *error = out.str();
    return false;
  }
  std::copy(d.labels, d.labels + n, labels_.begin() + first_row);
  if (split) {
    // Rows per id and per dense column, for the hot ids (a repeated id
    // counts once per entry, saturating).
    for (int64_t k = 0; k < num_ids; ++k) {
      int32_t& c = id_counts_[d.ids[k]];
      c += c < std::numeric_limits<int32_t>::max();
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* x = d.dense + i * dense_dim_;
      for (int64_t c = 0; c < dense_dim_; ++c) dense_uses_[c] += x[c] != 0.0f;
    }
  }
  // Records in the one-thread layout, or the split one with every id cold
  // (SplitRecords moves the hot ones once all rows are in).
  const int64_t pieces =
      std::max<int64_t>(1, std::min<int64_t>(chunks, n / 4096 + 1));
  parallel_for(pieces, [&](int64_t c) {
    for (int64_t i = n * c / pieces; i < n * (c + 1) / pieces; ++i) {
      const int64_t row = first_row + i;
      const int64_t first = d.row_ptr ? d.row_ptr[i] : 0;
      const int64_t nnz = d.row_ptr ? d.row_ptr[i + 1] - first : 0;
      char* record = buffer_.get() + offsets_[row];
      char* p;
      auto fill_header = [&](auto* h) {
        h->row = row;
        h->norm = d.squared_norms[i];
        h->label = d.labels[i];
        h->weight = d.example_weights[i];
        return reinterpret_cast<char*>(h + 1);
      };
      if (!split) {
        Header* h = reinterpret_cast<Header*>(record);
        p = fill_header(h);
        h->nnz = static_cast<int32_t>(nnz);
      } else {
        SplitHeader* h = reinterpret_cast<SplitHeader*>(record);
        p = fill_header(h);
        h->num_cold = static_cast<int32_t>(nnz);
        h->num_hot = 0;
        h->unused = 0;
      }
      // (Empty parts may come with null pointers: memcpy must not see them,
      // even for 0 bytes.)
      if (nnz > 0) std::memcpy(p, d.ids + first, 4 * nnz);
      p += 4 * nnz;
      if (units) {
        const int64_t u = nnz > 0 ? LeadingUnits(d.values + first, nnz) : 0;
        const int32_t count = static_cast<int32_t>(u);
        std::memcpy(p, &count, 4);
        p += 4;
        if (nnz > u) std::memcpy(p, d.values + first + u, 4 * (nnz - u));
        p += 4 * (nnz - u);
      } else if (has_values_) {
        if (nnz > 0) std::memcpy(p, d.values + first, 4 * nnz);
        p += 4 * nnz;
      }
      if (dense_dim_ > 0) {
        std::memcpy(p, d.dense + i * dense_dim_, 4 * dense_dim_);
      }
      p += 4 * dense_dim_;
      const int64_t record_end = row + 1 < first_row + n ? offsets_[row + 1]
                                                         : end;
      std::memset(p, 0, buffer_.get() + record_end - p);
    }
  });
  num_appended_ += n;
  ids_appended_ += num_ids;
  records_end_ = end;
  units_not_stored_ = units_not_stored;
  if (n > 0 && complete()) {
    std::memset(buffer_.get() + records_end_, 0, kTailBytes);
    if (split) SplitRecords(chunks, parallel_for);
  }
  return true;
}

void PackedRows::SplitRecords(int64_t chunks,
                              const ParallelFor& parallel_for) {
  std::vector<int64_t> uses;
  ChooseHotIds(&uses);
  ChooseSlotScales(uses);
  const std::vector<int32_t>& hot_index = id_counts_;
  // sum over the row's private slots of per_slot[h] x_h^2, the entries of
  // a repeated hot id summed first (per_slot has num_hot + dense_dim_
  // entries: hot ids, then dense columns). slot_sum / slot_row: a chunk's
  // scratch by hot index (slot_row[j] == i: slot_sum[j] holds row i's sum),
  // so that this is linear in the entries (comparing every pair of a row's
  // hot ids made packing for threads 3-5x slower than for one).
  auto WeightedNorm = [&](const double* per_slot, const int32_t* hot,
                          const float* values, int64_t num_hot,
                          const float* x, int64_t i, double* slot_sum,
                          int64_t* slot_row) {
    for (int64_t a = 0; a < num_hot; ++a) {
      const double v = has_values_ ? values[a] : 1.0;
      if (slot_row[hot[a]] != i) {
        slot_row[hot[a]] = i;
        slot_sum[hot[a]] = v;
      } else {
        slot_sum[hot[a]] += v;
      }
    }
    double sum = 0.0;
    for (int64_t a = 0; a < num_hot; ++a) {
      if (slot_row[hot[a]] != i) continue;  // a repeat, already counted
      slot_row[hot[a]] = -1;
      const double v = slot_sum[hot[a]];
      sum += per_slot[hot[a]] * v * v;
    }
    const double* per_dense = per_slot + hot_ids_.size();
    for (int64_t c = 0; c < dense_dim_; ++c) {
      sum += per_dense[c] * static_cast<double>(x[c]) * x[c];
    }
    return sum;
  };
  // kScaled: the step's q counts a private slot's x^2 scale times, i.e.
  // (scale - 1) x^2 more than |x|^2 does. kFresh: a row's norm is raised to
  // T S_i / 2, S_i = sum over its private slots of rho_h x_h^2 (rho_h: the
  // share of rows using slot h).
  const bool fresh = thread_sync_ == ThreadSync::kFresh;
  std::vector<double> per_slot(uses.size());
  for (size_t h = 0; h < per_slot.size(); ++h) {
    per_slot[h] = fresh ? static_cast<double>(uses[h]) /
                              std::max<int64_t>(num_examples_, 1)
                        : slot_scales_[h] - 1.0;
  }
  const int64_t n = num_examples_;
  const int64_t pieces =
      std::max<int64_t>(1, std::min<int64_t>(chunks, n / 4096 + 1));
  parallel_for(pieces, [&](int64_t c) {
    std::vector<int32_t> row_ids;
    std::vector<float> row_values;
    std::vector<double> slot_sum(hot_ids_.size());
    std::vector<int64_t> slot_row(slot_sum.size(), -1);
    for (int64_t i = n * c / pieces; i < n * (c + 1) / pieces; ++i) {
      SplitHeader* h =
          reinterpret_cast<SplitHeader*>(buffer_.get() + offsets_[i]);
      const int64_t nnz = h->num_cold;
      int32_t* ids = reinterpret_cast<int32_t*>(h + 1);
      float* values = reinterpret_cast<float*>(ids + nnz);
      row_ids.assign(ids, ids + nnz);
      if (has_values_) row_values.assign(values, values + nnz);
      // Cold ids first, then the hot ones as hot indices.
      int64_t at = 0;
      for (int hot = 0; hot < 2; ++hot) {
        for (int64_t k = 0; k < nnz; ++k) {
          const int32_t index = hot_index[row_ids[k]];
          if ((index >= 0) != (hot == 1)) continue;
          ids[at] = hot ? index : row_ids[k];
          if (has_values_) values[at] = row_values[k];
          ++at;
        }
        if (!hot) h->num_cold = static_cast<int32_t>(at);
      }
      h->num_hot = static_cast<int32_t>(nnz - h->num_cold);
      const float* dense = values + (has_values_ ? nnz : 0);
      const double extra =
          WeightedNorm(per_slot.data(), ids + h->num_cold,
                       values + h->num_cold, h->num_hot, dense, i,
                       slot_sum.data(), slot_row.data());
      h->norm = fresh ? std::max(h->norm, 0.5 * num_threads_ * extra)
                      : h->norm + extra;
    }
  });
  // The hot index was only needed to write the records.
  std::vector<int32_t>().swap(id_counts_);
  std::vector<int64_t>().swap(dense_uses_);
}

bool PackedRows::CheckDuals(const double* duals, const DualLossUpdater& loss,
                            std::string* error) const {
  const int64_t i =
      FirstInvalidDual(duals, labels_.data(), num_examples_, loss);
  if (i < 0) return true;
  std::ostringstream out;
  out << "duals[" << i << "] = " << duals[i] << " is not a valid dual of "
      << loss.Name() << " for the example's label (converted: " << labels_[i]
      << ")";
  *error = out.str();
  return false;
}

template <class Fn>
void PackedRows::VisitRecord(int64_t i, const Fn& fn) const {
  const char* record = buffer_.get() + offsets_[i];
  if (num_threads_ == 1) {
    const Header* h = reinterpret_cast<const Header*>(record);
    fn(h, h->nnz, h->nnz);
  } else {
    const SplitHeader* h = reinterpret_cast<const SplitHeader*>(record);
    fn(h, h->num_cold + h->num_hot, h->num_cold);
  }
}

double PackedRows::Margin(int64_t i, const double* weights,
                          double shrinkage) const {
  double wx = 0.0;
  VisitRecord(i, [&](const auto* h, int64_t nnz, int64_t cold) {
    const int32_t* ids = reinterpret_cast<const int32_t*>(h + 1);
    // Entry e's value: 1.0 without values or for e < units.
    const float* values = nullptr;
    const float* x;
    int64_t units = 0;
    if (num_threads_ == 1) {
      const Entries entries =
          EntriesOf(reinterpret_cast<const char*>(h), has_values_);
      values = entries.values;
      units = entries.units;
      x = entries.dense;
    } else {
      const float* stored = reinterpret_cast<const float*>(ids + nnz);
      if (has_values_) values = stored;
      x = has_values_ ? stored + nnz : stored;
    }
    if (values == nullptr) units = nnz;
    const double* wd = weights + num_sparse_features_;
    auto sum = [&](auto effective) {
      auto slot = [&](int64_t e) {
        return e < cold ? ids[e] : hot_ids_[ids[e]];
      };
      int64_t e = 0;
      for (; e < units; ++e) wx += 1.0 * effective(weights[slot(e)]);
      for (; e < nnz; ++e) {
        wx += static_cast<double>(values[e]) * effective(weights[slot(e)]);
      }
      for (int64_t c = 0; c < dense_dim_; ++c) wx += x[c] * effective(wd[c]);
    };
    if (shrinkage > 0.0) {
      sum([shrinkage](double w) { return ShrinkL1(w, shrinkage); });
    } else {
      sum([](double w) { return w; });
    }
  });
  return wx;
}

void PackedRows::AdaptiveScores(const SolverOptions& options,
                                const double* weights, const double* duals,
                                int64_t begin, int64_t end,
                                double* scores) const {
  const double shrinkage = options.l1 / options.l2;
  for (int64_t i = begin; i < end; ++i) {
    VisitRecord(i, [&](const auto* h, int64_t, int64_t) {
      // The record's norm: with threads, the scaled one the step's q uses.
      scores[i] = AdaptiveScore(*options.loss, options.l2, h->weight, h->norm,
                                h->label, duals[i],
                                Margin(i, weights, shrinkage));
    });
  }
}

void PackedRows::Solve(const SolverOptions& options, double* weights,
                       double* duals, StateRecord* record) const {
  if (num_examples_ == 0) return;
  if (num_threads_ > 1) {
    return SolveSplit(options, Interleave::kThreads, weights, duals);
  }
  SolveOneThread(options, weights, duals, record);
}

void PackedRows::SolveOneThread(const SolverOptions& options,
                                double* weights, double* duals,
                                StateRecord* record) const {
  const int64_t n = num_examples_;
  const double partitions = static_cast<double>(options.num_loss_partitions);
  // The margin at each row's last visit (NaN: not visited), turned into
  // its primal loss in place after the passes.
  double* primal = record != nullptr ? record->primal_losses : nullptr;
  if (record != nullptr) {
    std::fill(primal, primal + n, std::numeric_limits<double>::quiet_NaN());
  }
  const int64_t* failed = nullptr;  // the visit whose step failed
  double failed_margin = 0.0;
  const bool shrink = options.order == VisitOrder::kShrinking;
  std::unique_lock<std::mutex> shrinking_lock;
  if (shrink) {
    shrinking_lock = std::unique_lock<std::mutex>(shrinking_->mutex);
    if (static_cast<int64_t>(shrinking_->shrunk.size()) != n) {
      shrinking_->shrunk.assign(n, 0);
      shrinking_->high = std::numeric_limits<double>::infinity();
      shrinking_->low = -shrinking_->high;
      shrinking_->full_spread = std::numeric_limits<double>::infinity();
      shrinking_->since_full = 0;
    }
  }
  WithPartitionScaling(options, num_slots(), weights, [&] {
    std::vector<int64_t> visit;
    std::vector<double> scores;
    // 'shrinking': each pass is n steps' work, passes over the rows not
    // shrunk until they took n steps (one of them visits every row again
    // when the last ones settle), each with a fresh permutation.
    int draw = 0;  // the order drawn, PassRng's pass
    int64_t steps = 0;  // of this pass's n
    for (int pass = 0; pass < options.num_inner_iterations;
         pass += (!shrink || steps >= n) ? 1 : 0) {
      if (!shrink || steps >= n) steps = 0;
      if (options.Cancelled()) return;
      // The rows to visit, as record offsets (cyclic: all, in order).
      const int64_t* offsets = offsets_.data();
      int64_t count = n;
      ShrinkingPass shrinking{nullptr, 0.0, 0.0};
      if (shrink) {
        shrinking = {shrinking_->shrunk.data(), shrinking_->high,
                     shrinking_->low};
        visit.clear();
        for (int64_t i = 0; i < n; ++i) {
          if (!shrinking_->shrunk[i]) visit.push_back(i);
        }
        count = static_cast<int64_t>(visit.size());
        Rng rng = PassRng(options.seed, 0, draw++);
        // In place: item k reads visit[k] before out[k] = visit[k] is set.
        FillVisitOrder(options.order, 0, count, nullptr, &rng,
                       [&](int64_t k) { return offsets_[visit[k]]; },
                       visit.data());
        offsets = visit.data();
      } else if (options.order != VisitOrder::kCyclic) {
        if (options.order == VisitOrder::kAdaptive) {
          scores.resize(n);
          AdaptiveScores(options, weights, duals, 0, n, scores.data());
        }
        visit.resize(n);
        Rng rng = PassRng(options.seed, 0, draw++);
        FillVisitOrder(options.order, 0, n, scores.data(), &rng,
                       [this](int64_t i) { return offsets_[i]; },
                       visit.data());
        offsets = visit.data();
      }
      if (options.num_parts > 1) {  // this call's part of the pass's order
        int64_t begin, end;
        PartBounds(n, options.num_parts, options.part, &begin, &end);
        offsets += begin;
        count = end - begin;
      }
      Dispatch(options, has_values_,
               [&](const auto& loss, auto l1, auto values) {
                 using Loss = std::decay_t<decltype(loss)>;
                 const PackedPass<Loss, decltype(l1)::value,
                                  decltype(values)::value>
                     packed_pass(loss, options, partitions, PrefetchLines(),
                                 PrefetchWeights(weights) != nullptr);
                 if (record == nullptr) {
                   packed_pass.template Run<Header, false>(
                       buffer_.get(), offsets, count, dense_dim_,
                       num_sparse_features_, weights, duals, nullptr,
                       nullptr, shrink ? &shrinking : nullptr);
                   return;
                 }
                 const int64_t k = packed_pass.template Run<Header, true>(
                     buffer_.get(), offsets, count, dense_dim_,
                     num_sparse_features_, weights, duals, primal,
                     &failed_margin, shrink ? &shrinking : nullptr);
                 if (k >= 0) failed = offsets + k;
               });
      // A pass cut short by a cancel must not teach the shrinking state
      // (kept by the rows from call to call) its partial gradient range.
      if (options.Cancelled()) return;
      if (shrink) {
        // LIBLINEAR's outer-iteration end, with its stopping tolerance
        // relative: 0.1 of the spread of the last pass over all rows.
        // Measured against tighter rules (hinge, l2 = 1, epochs to
        // LIBLINEAR's objective over seeds 0-5, momentum 'auto'): 0.001
        // took 2,000 text-like rows 14-17 -> 13-14 epochs but heart_scale
        // 43-53 -> 50-59 (digits even / odd 35-41 either way); no return
        // before 20 n steps 12-13 on the text rows but heart_scale 45-69,
        // digits 37-48. LIBLINEAR's own rule (an absolute tolerance, its
        // eps) took ~14 n steps on the text rows in a reimplementation.
        steps += std::max<int64_t>(count, 1);
        ShrinkingState& state = *shrinking_;
        const double spread =
            count > 0 && shrinking.max_gradient >= shrinking.min_gradient
                ? shrinking.max_gradient - shrinking.min_gradient
                : 0.0;
        if (count == n) state.full_spread = spread;
        state.since_full = count == n ? 0 : state.since_full + count;
        const double inf = std::numeric_limits<double>::infinity();
        if (count < n && (spread <= 0.1 * state.full_spread ||
                          state.since_full >= 10 * n)) {
          std::fill(state.shrunk.begin(), state.shrunk.end(), 0);
          state.high = inf;
          state.low = -inf;
        } else {
          state.high = shrinking.max_gradient > 0.0 ? shrinking.max_gradient
                                                    : inf;
          state.low = shrinking.min_gradient < 0.0 ? shrinking.min_gradient
                                                   : -inf;
        }
      }
      if (failed != nullptr) {
        // The step's inputs, for the caller's error (the dual is as it was).
        const Header* h =
            reinterpret_cast<const Header*>(buffer_.get() + *failed);
        const DualLossUpdater& loss = *options.loss;
        const double q = partitions * h->weight * h->norm * (1.0 / options.l2);
        const double dual = duals[h->row];
        std::ostringstream out;
        out.precision(17);
        out << loss.Name() << ": the dual step of example " << h->row
            << " (label " << h->label << " as the loss uses it, dual "
            << dual << ", margin w.x = " << failed_margin
            << ", q = s |x|^2 / l2 = " << q << ") gives the dual "
            << loss.ComputeUpdatedDual(h->label, dual, failed_margin, q)
            << ", which float32 state cannot hold or whose weight change "
               "overflows; rescale the features or raise l2";
        record->error = out.str();
        return;
      }
    }
    if (record == nullptr) return;
    // The rows' losses, before the CoCoA+ scaling (at the weights the local
    // solve reached, as the visited rows' primal losses are).
    const DualLossUpdater& loss = *options.loss;
    const double shrinkage = options.l1 / options.l2;
    auto losses = [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const Header* h =
            reinterpret_cast<const Header*>(buffer_.get() + offsets_[i]);
        const double s = h->weight;
        if (s <= 0.0) {
          primal[i] = 0.0;
          record->dual_losses[i] = 0.0;
          continue;
        }
        const double wx = std::isnan(primal[i])
                              ? Margin(i, weights, shrinkage)
                              : primal[i];
        primal[i] = s * loss.PrimalLoss(wx, h->label);
        record->dual_losses[i] = s * loss.DualLoss(duals[i], h->label);
      }
    };
    const int64_t chunks =
        record->parallel_for ? std::min<int64_t>(record->chunks, n) : 1;
    if (chunks <= 1) {
      losses(0, n);
    } else {
      record->parallel_for(chunks, [&](int64_t c) {
        losses(n * c / chunks, n * (c + 1) / chunks);
      });
    }
  });
}

void PackedRows::SaveShrinking(ShrinkingMarks* marks) const {
  std::lock_guard<std::mutex> lock(shrinking_->mutex);
  *marks = *shrinking_;  // (vectors assigned: their memory reused)
}

void PackedRows::RestoreShrinking(const ShrinkingMarks& marks) const {
  std::lock_guard<std::mutex> lock(shrinking_->mutex);
  static_cast<ShrinkingMarks&>(*shrinking_) = marks;
}

void PackedRows::SolveLockstep(const SolverOptions& options, double* weights,
                               double* duals) const {
  if (num_examples_ == 0) return;
  if (num_threads_ > 1) {
    return SolveSplit(options, Interleave::kLockstep, weights, duals);
  }
  SolveOneThread(options, weights, duals, nullptr);
}

void PackedRows::SolveSequential(const SolverOptions& options,
                                 double* weights, double* duals) const {
  if (num_examples_ == 0) return;
  if (num_threads_ > 1) {
    return SolveSplit(options, Interleave::kSequential, weights, duals);
  }
  SolveOneThread(options, weights, duals, nullptr);
}

template <class Loss, bool kHasL1, bool kHasValues>
void PackedRows::RowLossesOneThread(const Loss& loss, const double* weights,
                                    const double* duals, double shrinkage,
                                    int64_t begin, int64_t end,
                                    double* primal, double* dual,
                                    ObjectiveParts* norms) const {
  // Margin's sums (one add chain per row, in its order: the sparse entries,
  // then the dense columns) are latency-bound; kGroup rows' chains side by
  // side run in about the time of one. The rows' losses are then added in
  // row order, as Evaluate's loop adds them. The norms' two chains (AddNorms
  // in its order; without L1 effective(w) = w is ShrinkL1(w, 0) but for -0)
  // advance two slots per step of the rows' loops, then to the end: on
  // 2,000 text rows of 2^15 weights they took as long as the rows.
  constexpr int kGroup = 4;
  const char* buffer = buffer_.get();
  const int64_t dd = dense_dim_;
  const double* wd = weights + num_sparse_features_;
  auto effective = [shrinkage](double w) {
    return kHasL1 ? ShrinkL1(w, shrinkage) : w;
  };
  const int64_t m = norms != nullptr ? num_slots() : 0;
  int64_t j = 0;
  double l2 = norms != nullptr ? norms->l2_norm_sq : 0.0;
  double l1 = norms != nullptr ? norms->l1_norm : 0.0;
  auto norm_step = [&]() __attribute__((always_inline)) {
    if (j < m) {
      const double v = effective(weights[j++]);
      l2 += v * v;
      l1 += std::fabs(v);
    }
  };
  double p = 0.0, q = 0.0;
  auto add = [&](const Header* h, double wx, int64_t i) {
    const double s = h->weight;
    if (s <= 0.0) return;
    p += s * loss.Loss::PrimalLoss(wx, h->label);
    q += s * loss.Loss::DualLoss(duals[i], h->label);
  };
  // The weights of the rows kAhead rows on are prefetched (their records,
  // read in storage order, the hardware streams in by then): the margins'
  // gathers from a table larger than the core's caches otherwise wait on
  // each load.
  constexpr int64_t kAhead = 8;
  const bool prefetching = PrefetchWeights(weights) != nullptr;
  auto prefetch = [&](int64_t r) __attribute__((always_inline)) {
    if (!prefetching || r >= end) return;
    const Header* ahead = reinterpret_cast<const Header*>(buffer + offsets_[r]);
    const int32_t* ahead_ids = reinterpret_cast<const int32_t*>(ahead + 1);
    for (int32_t e = 0; e < ahead->nnz; ++e) {
      __builtin_prefetch(weights + ahead_ids[e]);
    }
  };
  for (int64_t r = begin; r < std::min(end, begin + kAhead); ++r) prefetch(r);
  int64_t i = begin;
  for (; i + kGroup <= end; i += kGroup) {
    for (int g = 0; g < kGroup; ++g) prefetch(i + kAhead + g);
    const Header* h[kGroup];
    const int32_t* ids[kGroup];
    Entries entries[kGroup];
    int64_t nnz[kGroup];
    double wx[kGroup];
    int64_t common = std::numeric_limits<int64_t>::max();
    for (int g = 0; g < kGroup; ++g) {
      h[g] = reinterpret_cast<const Header*>(buffer + offsets_[i + g]);
      entries[g] = EntriesOf(buffer + offsets_[i + g], kHasValues);
      nnz[g] = h[g]->nnz;
      ids[g] = entries[g].ids;
      wx[g] = 0.0;
      common = std::min(common, nnz[g]);
    }
    for (int64_t e = 0; e < common; ++e) {
      for (int g = 0; g < kGroup; ++g) {
        wx[g] += entries[g].Value(e) * effective(weights[ids[g][e]]);
      }
      norm_step();
      norm_step();
    }
    for (int g = 0; g < kGroup; ++g) {
      for (int64_t e = common; e < nnz[g]; ++e) {
        wx[g] += entries[g].Value(e) * effective(weights[ids[g][e]]);
      }
    }
    for (int64_t c = 0; c < dd; ++c) {
      for (int g = 0; g < kGroup; ++g) {
        wx[g] += entries[g].dense[c] * effective(wd[c]);
      }
      norm_step();
      norm_step();
    }
    for (int g = 0; g < kGroup; ++g) add(h[g], wx[g], i + g);
  }
  for (; i < end; ++i) {
    const Header* h = reinterpret_cast<const Header*>(buffer + offsets_[i]);
    const Entries entries = EntriesOf(buffer + offsets_[i], kHasValues);
    const int64_t nnz = h->nnz;
    const int32_t* ids = entries.ids;
    const float* x = entries.dense;
    double wx = 0.0;
    for (int64_t e = 0; e < nnz; ++e) {
      wx += entries.Value(e) * effective(weights[ids[e]]);
    }
    for (int64_t c = 0; c < dd; ++c) wx += x[c] * effective(wd[c]);
    add(h, wx, i);
  }
  *primal = p;
  *dual = q;
  if (norms == nullptr) return;
  while (j < m) norm_step();
  norms->l2_norm_sq = l2;
  norms->l1_norm = l1;
}

namespace {

// |shrink(w)|^2 of weights[0, m) into parts->l2_norm_sq: in order (AddNorms'
// chain, the bits of an evaluation; its l1 sum beside), or in four
// interleaved sums, branch-free (the same value to rounding: ShrinkL1's
// tests mispredict on weights of either sign, ~160 us over 2^15 slots, and
// one chain of adds waits on each add).
void SquaredNorm(const double* weights, int64_t m, double shrinkage,
                 bool in_order, ObjectiveParts* parts) {
  if (in_order) {
    AddNorms(weights, m, shrinkage, parts);
    return;
  }
  double sums[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t j = 0;
  for (; j + 4 <= m; j += 4) {
    for (int k = 0; k < 4; ++k) {
      const double v = std::max(std::fabs(weights[j + k]) - shrinkage, 0.0);
      sums[k] += v * v;
    }
  }
  for (; j < m; ++j) {
    const double v = std::max(std::fabs(weights[j]) - shrinkage, 0.0);
    sums[0] += v * v;
  }
  parts->l2_norm_sq = (sums[0] + sums[1]) + (sums[2] + sums[3]);
}

}  // namespace

template <class DualLossOf>
double PackedRows::DualLossInBlocks(const DualLossOf& dual_loss) const {
  double total = 0.0;
  for (int64_t begin = 0; begin < num_examples_; begin += kSumRows) {
    const int64_t end = std::min(num_examples_, begin + kSumRows);
    double q = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const Header* h =
          reinterpret_cast<const Header*>(buffer_.get() + offsets_[i]);
      const double s = h->weight;
      if (s <= 0.0) continue;
      q += s * dual_loss(i, h);
    }
    total += q;
  }
  return total;
}

ObjectiveParts PackedRows::EvaluateDual(const SolverOptions& options,
                                        const double* weights,
                                        const double* duals,
                                        bool in_order) const {
  // Evaluate's sums in its order: the norms over the slots in order (as
  // AddNorms and RowLossesOneThread's norm chains), the rows' dual losses
  // in row order within blocks of kSumRows, the blocks' sums added in
  // order to 0.
  ObjectiveParts parts;
  SquaredNorm(weights, num_slots(), options.l1 / options.l2, in_order,
              &parts);
  // (Both record layouts start with the same header fields; the loss's
  // DualLoss through its base: the same function, the same bits.)
  const DualLossUpdater& loss = *options.loss;
  parts.dual_loss = DualLossInBlocks([&](int64_t i, const auto* h) {
    return loss.DualLoss(duals[i], h->label);
  });
  parts.primal_loss = std::numeric_limits<double>::quiet_NaN();
  parts.l1_norm = std::numeric_limits<double>::quiet_NaN();
  return parts;
}

ObjectiveParts PackedRows::Evaluate(const SolverOptions& options,
                                    const double* weights,
                                    const double* duals, int64_t chunks,
                                    const ParallelFor& parallel_for) const {
  ObjectiveParts parts;
  const double shrinkage = options.l1 / options.l2;
  bool summed = false;  // (Dispatch knows every binary loss)
  if (num_threads_ == 1) {
    // (ShrinkL1(w, 0) is w but for -0 -> +0, the same margin and norms:
    // Dispatch's L1 flag may stand for shrinkage > 0.)
    Dispatch(options, has_values_,
             [&](const auto& loss, auto l1, auto values) {
               summed = true;
               using Loss = std::decay_t<decltype(loss)>;
               if (num_examples_ <= kSumRows) {
                 // One block of rows (SumLosses' sums, added to the parts
                 // after the norms as there), the norms beside it.
                 double primal = 0.0, dual = 0.0;
                 RowLossesOneThread<Loss, decltype(l1)::value,
                                    decltype(values)::value>(
                     loss, weights, duals, shrinkage, 0, num_examples_,
                     &primal, &dual, &parts);
                 parts.primal_loss += primal;
                 parts.dual_loss += dual;
                 return;
               }
               AddNorms(weights, num_slots(), shrinkage, &parts);
               SumLosses(num_examples_, chunks, parallel_for,
                         [&](int64_t begin, int64_t end, double* primal,
                             double* dual) {
                           RowLossesOneThread<Loss, decltype(l1)::value,
                                              decltype(values)::value>(
                               loss, weights, duals, shrinkage, begin, end,
                               primal, dual, nullptr);
                         },
                         &parts);
             });
  }
  if (summed) return parts;
  AddNorms(weights, num_slots(), shrinkage, &parts);
  const DualLossUpdater& loss = *options.loss;
  SumLosses(num_examples_, chunks, parallel_for,
            [&](int64_t begin, int64_t end, double* primal, double* dual) {
              double p = 0.0, q = 0.0;
              for (int64_t i = begin; i < end; ++i) {
                VisitRecord(i, [&](const auto* h, int64_t, int64_t) {
                  const double s = h->weight;
                  if (s <= 0.0) return;
                  p += s * loss.PrimalLoss(Margin(i, weights, shrinkage),
                                           h->label);
                  q += s * loss.DualLoss(duals[i], h->label);
                });
              }
              *primal = p;
              *dual = q;
            },
            &parts);
  return parts;
}

}  // namespace tf_sdca

// ------------------------------------------------ multiclass (block) solve

namespace tf_sdca {

// Sparse entries first, then dense columns; each slot's K weights are
// contiguous, so the inner loop is a contiguous axpy.
template <class Weight, class Fn>
void PackedRows::ForEachClassRow(const char* record, int64_t num_classes,
                                 Weight* weights, const Fn& fn) const {
  // Both layouts share the header's first 28 bytes (row, norm, label,
  // weight); a split record (num_threads_ > 1) lists its cold ids, then
  // its hot ids as indices into hot_ids_.
  const Header* h = reinterpret_cast<const Header*>(record);
  int64_t nnz = h->nnz, cold = nnz;
  // Entry e's value: 1.0 without values or for e < units.
  const int32_t* ids;
  const float* values;
  const float* x;
  int64_t units = 0;
  if (num_threads_ == 1) {
    const Entries entries = EntriesOf(record, has_values_);
    ids = entries.ids;
    values = entries.values;
    x = entries.dense;
    units = entries.units;
  } else {
    const SplitHeader* split = reinterpret_cast<const SplitHeader*>(record);
    cold = split->num_cold;
    nnz = cold + split->num_hot;
    ids = reinterpret_cast<const int32_t*>(split + 1);
    const float* stored = reinterpret_cast<const float*>(ids + nnz);
    values = has_values_ ? stored : nullptr;
    x = has_values_ ? stored + nnz : stored;
  }
  for (int64_t e = 0; e < nnz; ++e) {
    const int64_t id = e < cold ? ids[e] : hot_ids_[ids[e]];
    fn(weights + id * num_classes,
       values == nullptr || e < units ? 1.0 : values[e]);
  }
  for (int64_t c = 0; c < dense_dim_; ++c) {
    if (x[c] != 0.0f) {
      fn(weights + (num_sparse_features_ + c) * num_classes,
         static_cast<double>(x[c]));
    }
  }
}

namespace {

// CheckBlockDuals' message for row i's block.
std::string BlockDualError(int64_t i, const double* block, int64_t num_classes,
                           int label, const MulticlassLoss& loss) {
  std::ostringstream out;
  out << "duals[" << i << ", :] = [";
  for (int64_t j = 0; j < num_classes && j < 8; ++j) {
    out << (j ? ", " : "") << block[j];
  }
  out << (num_classes > 8 ? ", ...]" : "]") << " is not a valid dual block of "
      << loss.Name() << " for class " << label
      << ": it must be e_y - p with p on the simplex (duals[" << i << ", "
      << label << "] in [0, 1], the others <= 0, the row summing to 0)";
  return out.str();
}

}  // namespace

template <int K>
void PackedRows::FixedBlockScores(const char* record, const double* weights,
                                  double* z) const {
  // The accumulators in registers (K known, not aliasing the weights); the
  // same sums in the same order as the loop over num_classes.
  double acc[K];
  for (int j = 0; j < K; ++j) acc[j] = 0.0;
  if (num_threads_ > 1) {
    ForEachClassRow(record, K, weights, [&](const double* row, double v) {
      for (int j = 0; j < K; ++j) acc[j] += v * row[j];
    });
  } else {
    // ForEachClassRow's visits, and the dense columns' zeros too (no
    // branch): 0 x a finite weight adds +-0 to a sum that is never -0, so
    // the sums are the same bits.
    const Header* h = reinterpret_cast<const Header*>(record);
    const int64_t nnz = h->nnz;
    const Entries entries = EntriesOf(record, has_values_);
    const int32_t* ids = entries.ids;
    for (int64_t e = 0; e < nnz; ++e) {
      const double* row = weights + static_cast<int64_t>(ids[e]) * K;
      const double v = entries.Value(e);
      for (int j = 0; j < K; ++j) acc[j] += v * row[j];
    }
    const float* x = entries.dense;
    const double* dense = weights + num_sparse_features_ * K;
    for (int64_t c = 0; c < dense_dim_; ++c) {
      const double v = x[c];
      const double* row = dense + c * K;
      for (int j = 0; j < K; ++j) acc[j] += v * row[j];
    }
  }
  for (int j = 0; j < K; ++j) z[j] = acc[j];
}

template <int K>
void PackedRows::FixedBlockScoresPair(const char* a, const char* b,
                                      const double* weights, double* za,
                                      double* zb) const {
  double acc_a[K], acc_b[K];
  for (int j = 0; j < K; ++j) acc_a[j] = acc_b[j] = 0.0;
  const Header* ha = reinterpret_cast<const Header*>(a);
  const Header* hb = reinterpret_cast<const Header*>(b);
  const int64_t nnz_a = ha->nnz, nnz_b = hb->nnz;
  const Entries ea = EntriesOf(a, has_values_), eb = EntriesOf(b, has_values_);
  auto sparse = [&](const Entries& en, int64_t e, double* acc)
                    __attribute__((always_inline)) {
    const double* row = weights + static_cast<int64_t>(en.ids[e]) * K;
    const double v = en.Value(e);
    for (int j = 0; j < K; ++j) acc[j] += v * row[j];
  };
  const int64_t common = std::min(nnz_a, nnz_b);
  for (int64_t e = 0; e < common; ++e) {
    sparse(ea, e, acc_a);
    sparse(eb, e, acc_b);
  }
  for (int64_t e = common; e < nnz_a; ++e) sparse(ea, e, acc_a);
  for (int64_t e = common; e < nnz_b; ++e) sparse(eb, e, acc_b);
  const float* x_a = ea.dense;
  const float* x_b = eb.dense;
  const double* dense = weights + num_sparse_features_ * K;
  for (int64_t c = 0; c < dense_dim_; ++c) {
    const double va = x_a[c], vb = x_b[c];
    const double* row = dense + c * K;
    for (int j = 0; j < K; ++j) {
      acc_a[j] += va * row[j];
      acc_b[j] += vb * row[j];
    }
  }
  for (int j = 0; j < K; ++j) {
    za[j] = acc_a[j];
    zb[j] = acc_b[j];
  }
}

bool PackedRows::BlockScoresPair(const char* a, const char* b,
                                 int64_t num_classes, const double* weights,
                                 double* za, double* zb) const {
  switch (num_classes) {
#define TF_SDCA_PAIR_SCORES(K)                          \
  case K:                                               \
    FixedBlockScoresPair<K>(a, b, weights, za, zb);     \
    return true;
    TF_SDCA_PAIR_SCORES(2)
    TF_SDCA_PAIR_SCORES(3)
    TF_SDCA_PAIR_SCORES(4)
    TF_SDCA_PAIR_SCORES(5)
    TF_SDCA_PAIR_SCORES(6)
    TF_SDCA_PAIR_SCORES(7)
    TF_SDCA_PAIR_SCORES(8)
    TF_SDCA_PAIR_SCORES(9)
    TF_SDCA_PAIR_SCORES(10)
    TF_SDCA_PAIR_SCORES(11)
    TF_SDCA_PAIR_SCORES(12)
    TF_SDCA_PAIR_SCORES(16)
    TF_SDCA_PAIR_SCORES(20)
#undef TF_SDCA_PAIR_SCORES
    default:
      return false;
  }
}

void PackedRows::BlockScores(const char* record, int64_t num_classes,
                             const double* weights, double shrinkage,
                             double* z) const {
  if (shrinkage == 0.0) {
    switch (num_classes) {
#define TF_SDCA_FIXED_SCORES(K) \
  case K:                       \
    return FixedBlockScores<K>(record, weights, z);
      TF_SDCA_FIXED_SCORES(2)
      TF_SDCA_FIXED_SCORES(3)
      TF_SDCA_FIXED_SCORES(4)
      TF_SDCA_FIXED_SCORES(5)
      TF_SDCA_FIXED_SCORES(6)
      TF_SDCA_FIXED_SCORES(7)
      TF_SDCA_FIXED_SCORES(8)
      TF_SDCA_FIXED_SCORES(9)
      TF_SDCA_FIXED_SCORES(10)
      TF_SDCA_FIXED_SCORES(11)
      TF_SDCA_FIXED_SCORES(12)
      TF_SDCA_FIXED_SCORES(16)
      TF_SDCA_FIXED_SCORES(20)
#undef TF_SDCA_FIXED_SCORES
      default:
        break;
    }
  }
  std::fill(z, z + num_classes, 0.0);
  ForEachClassRow(record, num_classes, weights,
                  [&](const double* row, double v) {
                    if (shrinkage > 0.0) {
                      for (int64_t j = 0; j < num_classes; ++j) {
                        z[j] += v * ShrinkL1(row[j], shrinkage);
                      }
                    } else {
                      for (int64_t j = 0; j < num_classes; ++j) {
                        z[j] += v * row[j];
                      }
                    }
                  });
}

void PackedRows::ActiveBlockScores(const char* record, int64_t num_classes,
                                   const double* weights, double shrinkage,
                                   const int* active, int count,
                                   double* z) const {
  for (int a = 0; a < count; ++a) z[active[a]] = 0.0;
  ForEachClassRow(record, num_classes, weights,
                  [&](const double* row, double v) {
                    if (shrinkage > 0.0) {
                      for (int a = 0; a < count; ++a) {
                        z[active[a]] += v * ShrinkL1(row[active[a]],
                                                     shrinkage);
                      }
                    } else {
                      for (int a = 0; a < count; ++a) {
                        z[active[a]] += v * row[active[a]];
                      }
                    }
                  });
}

void PackedRows::SolveBlocks(const SolverOptions& options,
                             const MulticlassLoss& loss, double* weights,
                             double* duals, std::string* dual_error) const {
  const int64_t n = num_examples_;
  if (n == 0) return;
  if (num_threads_ > 1) {
    SolveBlocksSplit(options, loss, Interleave::kThreads, weights, duals);
    if (dual_error != nullptr) CheckBlockDuals(duals, loss, dual_error);
    return;
  }
  bool blocks_valid = true;
  const int64_t num_classes = loss.num_classes();
  const double sigma = static_cast<double>(options.num_loss_partitions);
  const double inv_l2 = 1.0 / options.l2;
  const double shrinkage = options.l1 / options.l2;
  std::vector<double> z(num_classes), next(num_classes),
      delta(num_classes), work(4 * num_classes);
  std::vector<int64_t> changed;
  changed.reserve(num_classes);
  // 'shrinking' (rows whose block can rest at a vertex p = e_m: multiclass
  // hinge): LIBLINEAR's scheme with the reference's per-row gap G_i as the
  // violation. A row at a vertex e_m (m = y: classified with margin; m !=
  // y: all its mass on the class that violates most) whose margin
  // max_{j != m} s_j - s_m is below minus the largest G_i of the previous
  // pass is left out of the passes (its step would not move it, and it is
  // unlikely to move soon); when the largest G_i of the rows still visited
  // is under a tenth of that of the last pass over all rows, every row
  // comes back, the threshold kept (that pass leaves out again the rows far
  // inside their margin). Each pass is n steps' work: passes over the rows
  // still visited until they took n steps, as LIBLINEAR's outer iterations
  // over its active set (on digits, 1,797 rows, l2 = 1, ~1/3 of the
  // epochs to LIBLINEAR's objective of passes over every row with the
  // rows out skipped). Which rows are out carries over between calls, as
  // for the binary losses.
  const bool shrink =
      options.order == VisitOrder::kShrinking && loss.Shrinkable();
  // And LIBLINEAR's shrinking of a row's classes: a class at p_j = 0 whose
  // score is below every class's in the row's support is left out of the
  // row's scores and steps (ActiveStep) until every row comes back.
  const bool shrink_classes = shrink && loss.ClassShrinkable();
  std::unique_lock<std::mutex> shrinking_lock;
  if (shrink) {
    shrinking_lock = std::unique_lock<std::mutex>(shrinking_->mutex);
    if (static_cast<int64_t>(shrinking_->shrunk.size()) != n) {
      shrinking_->shrunk.assign(n, 0);
      shrinking_->high = std::numeric_limits<double>::infinity();
      shrinking_->full_spread = std::numeric_limits<double>::infinity();
      shrinking_->since_full = 0;
    }
    if (shrink_classes &&
        static_cast<int64_t>(shrinking_->class_shrunk.size()) !=
            n * num_classes) {
      shrinking_->class_shrunk.assign(n * num_classes, 0);
      shrinking_->class_since_full = -1;
    }
  }
  std::vector<int> active(num_classes);
  WithPartitionScaling(options, num_slots() * num_classes, weights, [&] {
    std::vector<int64_t> visit(n);
    // 'shrinking': each pass is n steps' work, passes over the rows not
    // shrunk until they took n steps (one of them visits every row again
    // when the last ones settle), each with a fresh permutation.
    int draw = 0;  // the order drawn, PassRng's pass
    int64_t steps = 0;  // of this pass's n
    for (int pass = 0; pass < options.num_inner_iterations;
         pass += (!shrink || steps >= n) ? 1 : 0) {
      if (!shrink || steps >= n) steps = 0;
      if (options.Cancelled()) return;
      Rng rng = PassRng(options.seed, 0, draw++);
      int64_t count = n;
      if (shrink) {
        count = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (!shrinking_->shrunk[i]) visit[count++] = i;
        }
        // In place: item k reads visit[k] before out[k] is set.
        FillVisitOrder(options.order, 0, count, nullptr, &rng,
                       [&](int64_t k) { return offsets_[visit[k]]; },
                       visit.data());
      } else {
        FillVisitOrder(options.order, 0, n, nullptr, &rng,
                       [this](int64_t i) { return offsets_[i]; },
                       visit.data());
      }
      int64_t first = 0;  // this call's part of the pass's order
      if (options.num_parts > 1) PartBounds(n, options.num_parts,
                                            options.part, &first, &count);
      double largest_gap = 0.0;
      const double* prefetch_w = PrefetchWeights(weights, num_classes);
      for (int64_t k = first; k < count; ++k) {
        // A block step costs K times a binary one: look at the
        // cancellation as often, in rows, as the binary passes do.
        if ((k & (kCancelCheckRows - 1)) == kCancelCheckRows - 1 &&
            options.Cancelled()) {
          return;
        }
        PrefetchAhead<Header>(buffer_.get(), visit.data(), k, count,
                              PrefetchLines(), prefetch_w, duals,
                              [](const Header* h) { return h->nnz; },
                              num_classes);
        const char* record = buffer_.get() + visit[k];
        const Header* h = reinterpret_cast<const Header*>(record);
        const double s = h->weight;
        if (s <= 0.0) continue;
        const int label = static_cast<int>(h->label);
        double* alpha = duals + h->row * num_classes;
        const double q = sigma * s * h->norm * inv_l2;
        uint8_t* out = shrink_classes && q > 0.0
                           ? shrinking_->class_shrunk.data() +
                                 h->row * num_classes
                           : nullptr;
        int num_active = 0;
        if (out != nullptr) {
          for (int64_t j = 0; j < num_classes; ++j) {
            if (!out[j]) active[num_active++] = static_cast<int>(j);
          }
        }
        if (out != nullptr && num_active < num_classes) {
          ActiveBlockScores(record, num_classes, weights, shrinkage,
                            active.data(), num_active, z.data());
        } else {
          BlockScores(record, num_classes, weights, shrinkage, z.data());
        }
        if (out != nullptr) {
          double gap, margin;
          bool at_bound;
          const int left = loss.ActiveStep(
              label, alpha, z.data(), q, active.data(), num_active, &gap,
              &at_bound, &margin, next.data(), work.data());
          if (left < num_active) {
            std::fill(out, out + num_classes, 1);
            for (int a = 0; a < left; ++a) out[active[a]] = 0;
          }
          if (at_bound && margin < -shrinking_->high) {
            shrinking_->shrunk[h->row] = 1;
            continue;
          }
          largest_gap = std::max(largest_gap, gap);
        } else if (shrink) {
          double gap, margin;
          bool at_bound;
          loss.BlockViolation(label, alpha, z.data(), &gap, &at_bound,
                              &margin);
          if (at_bound && margin < -shrinking_->high) {
            shrinking_->shrunk[h->row] = 1;
            continue;
          }
          largest_gap = std::max(largest_gap, gap);
        }
        if (out == nullptr) {
          loss.UpdateBlock(label, alpha, z.data(), q, next.data(),
                           work.data());
        }
        if (dual_error != nullptr && blocks_valid &&
            !loss.DualInDomain(next.data(), label)) {
          blocks_valid = false;
          *dual_error =
              BlockDualError(h->row, next.data(), num_classes, label, loss);
        }
        // W moves by (sigma s / l2) x (alpha' - alpha)^T, in the classes
        // whose duals changed only (a hinge step changes a few of K).
        changed.clear();
        for (int64_t j = 0; j < num_classes; ++j) {
          const double change = next[j] - alpha[j];
          if (change == 0.0) continue;
          delta[j] = sigma * s * change * inv_l2;
          changed.push_back(j);
          alpha[j] = next[j];
        }
        if (changed.empty()) continue;
        ForEachClassRow(record, num_classes, weights,
                        [&](double* row, double v) {
                          for (const int64_t j : changed) {
                            row[j] += v * delta[j];
                          }
                        });
      }
      if (shrink) {
        steps += std::max<int64_t>(count, 1);
        ShrinkingState& state = *shrinking_;
        if (count == n) state.full_spread = largest_gap;
        state.since_full = count == n ? 0 : state.since_full + count;
        if (count < n && (largest_gap <= 0.1 * state.full_spread ||
                          state.since_full >= 10 * n)) {
          std::fill(state.shrunk.begin(), state.shrunk.end(), 0);
          std::fill(state.class_shrunk.begin(), state.class_shrunk.end(), 0);
          state.class_since_full = -1;
        } else if (shrink_classes) {
          if (state.class_since_full < 0) {
            state.class_full_gap = largest_gap;
            state.class_since_full = count;
          } else if (state.class_since_full += count,
                     largest_gap <= 0.1 * state.class_full_gap ||
                         state.class_since_full >= 3 * n) {
            std::fill(state.class_shrunk.begin(), state.class_shrunk.end(),
                      0);
            state.class_since_full = -1;
          }
        }
        state.high = largest_gap > 0.0
                         ? largest_gap
                         : std::numeric_limits<double>::infinity();
      }
    }
  });
}

void PackedRows::SolveBlocksInterleaved(const SolverOptions& options,
                                        const MulticlassLoss& loss,
                                        Interleave interleave,
                                        double* weights, double* duals) const {
  if (num_threads_ > 1) {
    SolveBlocksSplit(options, loss, interleave, weights, duals);
  } else {
    SolveBlocks(options, loss, weights, duals);
  }
}

void PackedRows::SolveBlocksLockstep(const SolverOptions& options,
                                     const MulticlassLoss& loss,
                                     double* weights, double* duals) const {
  SolveBlocksInterleaved(options, loss, Interleave::kLockstep, weights, duals);
}

void PackedRows::SolveBlocksSequential(const SolverOptions& options,
                                       const MulticlassLoss& loss,
                                       double* weights, double* duals) const {
  SolveBlocksInterleaved(options, loss, Interleave::kSequential, weights,
                         duals);
}

ObjectiveParts PackedRows::EvaluateBlocks(
    const SolverOptions& options, const MulticlassLoss& loss,
    const double* weights, const double* duals, int64_t chunks,
    const ParallelFor& parallel_for) const {
  ObjectiveParts parts;
  const int64_t num_classes = loss.num_classes();
  const double shrinkage = options.l1 / options.l2;
  AddNorms(weights, num_slots() * num_classes, shrinkage, &parts);
  // One-thread records without L1: two rows' scores at a time (each row's
  // sums in its order, its loss added in row order: the same bits), their
  // add chains side by side (digits' 64 pixels x 10 classes: ~0.6x the
  // time of an evaluation).
  const bool pairs = num_threads_ == 1 && shrinkage == 0.0;
  SumLosses(num_examples_, chunks, parallel_for,
            [&](int64_t begin, int64_t end, double* primal, double* dual) {
              std::vector<double> z(num_classes), z2(num_classes);
              double p = 0.0, q = 0.0;
              for (int64_t i = begin; i < end; ++i) {
                if (pairs && i + 1 < end) {
                  const char* a = buffer_.get() + offsets_[i];
                  const char* b = buffer_.get() + offsets_[i + 1];
                  const Header* ha = reinterpret_cast<const Header*>(a);
                  const Header* hb = reinterpret_cast<const Header*>(b);
                  const double sa = ha->weight, sb = hb->weight;
                  if (sa > 0.0 && sb > 0.0 &&
                      BlockScoresPair(a, b, num_classes, weights, z.data(),
                                      z2.data())) {
                    const int la = static_cast<int>(ha->label);
                    p += sa * loss.PrimalLoss(z.data(), la);
                    q += sa * loss.DualLoss(duals + i * num_classes, la);
                    const int lb = static_cast<int>(hb->label);
                    p += sb * loss.PrimalLoss(z2.data(), lb);
                    q += sb * loss.DualLoss(duals + (i + 1) * num_classes,
                                            lb);
                    ++i;
                    continue;
                  }
                }
                if (num_threads_ == 1) {  // (split records: hot ids cached)
                  PrefetchAhead<Header>(buffer_.get(), offsets_.data(), i,
                                        end, PrefetchLines(),
                                        PrefetchWeights(weights, num_classes),
                                        duals,
                                        [](const Header* h) { return h->nnz; },
                                        num_classes);
                }
                const char* record = buffer_.get() + offsets_[i];
                const Header* h = reinterpret_cast<const Header*>(record);
                const double s = h->weight;
                if (s <= 0.0) continue;
                BlockScores(record, num_classes, weights, shrinkage,
                            z.data());
                const int label = static_cast<int>(h->label);
                p += s * loss.PrimalLoss(z.data(), label);
                q += s * loss.DualLoss(duals + i * num_classes, label);
              }
              *primal = p;
              *dual = q;
            },
            &parts);
  return parts;
}

ObjectiveParts PackedRows::EvaluateBlocksDual(const SolverOptions& options,
                                              const MulticlassLoss& loss,
                                              const double* weights,
                                              const double* duals,
                                              bool in_order) const {
  // EvaluateBlocks' sums in its order: the norms of the [slots, K] table in
  // order, the rows' dual losses in row order within blocks of kSumRows,
  // the blocks' sums added in order to 0.
  ObjectiveParts parts;
  const int64_t num_classes = loss.num_classes();
  SquaredNorm(weights, num_slots() * num_classes, options.l1 / options.l2,
              in_order, &parts);
  parts.dual_loss = DualLossInBlocks([&](int64_t i, const auto* h) {
    return loss.DualLoss(duals + i * num_classes, static_cast<int>(h->label));
  });
  parts.primal_loss = std::numeric_limits<double>::quiet_NaN();
  parts.l1_norm = std::numeric_limits<double>::quiet_NaN();
  return parts;
}

void PackedRows::BlockRowLosses(const SolverOptions& options,
                                const MulticlassLoss& loss,
                                const double* weights, const double* duals,
                                double* primal, double* dual) const {
  const int64_t num_classes = loss.num_classes();
  const double shrinkage = options.l1 / options.l2;
  std::vector<double> z(num_classes);
  for (int64_t i = 0; i < num_examples_; ++i) {
    const char* record = buffer_.get() + offsets_[i];
    const Header* h = reinterpret_cast<const Header*>(record);
    const double s = h->weight;
    primal[i] = dual[i] = 0.0;
    if (s <= 0.0) continue;
    BlockScores(record, num_classes, weights, shrinkage, z.data());
    const int label = static_cast<int>(h->label);
    primal[i] = s * loss.PrimalLoss(z.data(), label);
    dual[i] = s * loss.DualLoss(duals + i * num_classes, label);
  }
}

void PackedRows::AddBlockChanges(const double* change, int64_t num_classes,
                                 double scale, double* weights) const {
  for (int64_t i = 0; i < num_examples_; ++i) {
    const double* c = change + i * num_classes;
    if (std::all_of(c, c + num_classes, [](double v) { return v == 0.0; })) {
      continue;
    }
    const char* record = buffer_.get() + offsets_[i];
    const double coef =
        scale * reinterpret_cast<const Header*>(record)->weight;
    ForEachClassRow(record, num_classes, weights, [&](double* row, double v) {
      for (int64_t k = 0; k < num_classes; ++k) row[k] += coef * v * c[k];
    });
  }
}

bool PackedRows::CheckBlockDuals(const double* duals,
                                 const MulticlassLoss& loss,
                                 std::string* error) const {
  const int64_t num_classes = loss.num_classes();
  for (int64_t i = 0; i < num_examples_; ++i) {
    const int label = static_cast<int>(labels_[i]);
    const double* block = duals + i * num_classes;
    if (loss.DualInDomain(block, label)) continue;
    *error = BlockDualError(i, block, num_classes, label, loss);
    return false;
  }
  return true;
}

bool PackedRows::CopyBlockDuals(const double* from, const MulticlassLoss& loss,
                                double* to, std::string* error) const {
  const int64_t num_classes = loss.num_classes();
  for (int64_t i = 0; i < num_examples_; ++i) {
    const int label = static_cast<int>(labels_[i]);
    double* block = to + i * num_classes;
    std::copy(from + i * num_classes, from + (i + 1) * num_classes, block);
    if (loss.DualInDomain(block, label)) continue;
    *error = BlockDualError(i, block, num_classes, label, loss);
    return false;
  }
  return true;
}

}  // namespace tf_sdca
