// The lock-free threads' passes over split records (PackedRows packed for
// num_threads > 1): each thread's share of a pass (SplitPass; BlockSplitPass
// for the multiclass losses), their merge schedule, and PackedRows::
// SolveSplit / SolveBlocksSplit, which cut a pass's visiting order into the
// threads' shares and run them on std::threads or in lockstep. The step
// itself is row_step.h's, as in the one-thread passes of packed_rows.cc;
// the class comment of PackedRows (packed_rows.h) has the scheme.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/core/multiclass_loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/random.h"
#include "kernels/core/row_step.h"
#include "kernels/core/visit_order.h"

namespace tf_sdca {

namespace {

using row_step::Dispatch;
using row_step::PlainAccess;
using row_step::PrefetchAhead;
using row_step::RowStep;
using row_step::SharedAccess;
using row_step::WithPartitionScaling;

// A thread's merge schedule over its private slots [hot ids | dense
// columns] (`size` of them, the first `frequent` the most frequent hot ids):
// counts the row about to be solved and calls merge(begin, end) for the
// runs due. With ThreadSync::kFresh's `ranges` each range every
// `range.every` rows; otherwise all every `sync_every` rows, the frequent
// hot ids and the dense columns every `frequent_every`.
template <class Merge>
__attribute__((always_inline)) inline void MergeDue(
    const PackedRows::MergeRange* ranges, int64_t num_ranges,
    int64_t sync_every, int64_t frequent_every, int64_t frequent,
    int64_t num_hot, int64_t size, int64_t* since_merge, const Merge& merge) {
  if (num_ranges > 0) {
    if (++*since_merge == sync_every) *since_merge = 0;
    for (int64_t r = 0; r < num_ranges; ++r) {
      if ((*since_merge & (ranges[r].every - 1)) == 0) {
        merge(ranges[r].begin, ranges[r].end);
      }
    }
  } else if (++*since_merge == sync_every) {
    *since_merge = 0;
    merge(0, size);
  } else if (*since_merge % frequent_every == 0) {
    merge(0, frequent);
    merge(num_hot, size);
  }
}

// Runs the threads' shares of one pass (each a SplitPass or BlockSplitPass:
// Begin, Visit(k) for its k < count(), End), on `run_threads`, or on the
// calling thread: kLockstep interleaved, every share's k-th step reading
// before any share's k-th change of the shared table is written
// (Visit<true> + ApplyDeferred); kSequential one share after another.
// Every kCancelCheckRows rows a cancelled solve ends the shares (merged as
// at their end).
template <class Pass>
void RunShares(const std::vector<std::unique_ptr<Pass>>& passes,
               PackedRows::Interleave interleave,
               const SolverOptions& options, const ParallelFor& run_threads) {
  auto cancelled = [&options](int64_t k) {
    return (k & (kCancelCheckRows - 1)) == kCancelCheckRows - 1 &&
           options.Cancelled();
  };
  auto run_share = [&](int64_t t) {
    Pass& p = *passes[t];
    p.Begin();
    for (int64_t k = 0; k < p.count(); ++k) {
      if (cancelled(k)) break;
      p.Visit(k);
    }
    p.End();
  };
  if (interleave == PackedRows::Interleave::kThreads) {
    run_threads(static_cast<int64_t>(passes.size()), run_share);
    return;
  }
  if (interleave == PackedRows::Interleave::kSequential) {
    for (size_t t = 0; t < passes.size(); ++t) run_share(t);
    return;
  }
  int64_t longest = 0;
  for (auto& p : passes) {
    p->Begin();
    longest = std::max(longest, p->count());
  }
  for (int64_t k = 0; k < longest; ++k) {
    if (cancelled(k)) break;
    for (auto& p : passes) {
      if (k < p->count()) p->template Visit<true>(k);
    }
    for (auto& p : passes) p->ApplyDeferred();
  }
  for (auto& p : passes) p->End();
}

// A split record's parts (PackedRows::SplitHeader): its ids (the first
// num_cold table ids, the others indices of hot ids), their values (absent
// without values), and the dense part `x`; what both split passes read.
template <class Header>
struct SplitRecord {
  const Header* h;
  int64_t cold, nnz;
  const int32_t* ids;
  const float* values;
  const float* x;

  __attribute__((always_inline)) SplitRecord(const char* record,
                                             bool has_values)
      : h(reinterpret_cast<const Header*>(record)),
        cold(h->num_cold),
        nnz(cold + h->num_hot),
        ids(reinterpret_cast<const int32_t*>(h + 1)),
        values(reinterpret_cast<const float*>(ids + nnz)),
        x(has_values ? values + nnz : values) {}
};

// One thread's share of a pass over split records (PackedRows with
// num_threads > 1), taken one row at a time (Visit) so that the threads can
// run on their own std::threads or interleaved in lockstep on one. Cold
// weights are read and added atomically in the shared table `w`; hot and
// dense weights live in a private copy merged into `shared_hot` ([hot ids |
// dense columns]) by atomic adds every `sync_every` rows (the dense ones and
// the most frequent hot ids every `frequent_every` rows) and at the end.
//
// Between merges the threads do not see each other's changes of a hot
// weight, so T threads move it up to T times as far as each of them
// expects: on a weight in every row (an intercept) three or more such
// threads overshoot and the gap stops falling. The private copy therefore
// follows CoCoA+'s local subproblem with sigma' = scale[h] on that slot
// (PackedRows::ChooseSlotScales): it holds shared + scale[h] * (this
// thread's change), the step's q counts the slot's x^2 scale[h] times (the
// records' norms, see PackedRows::Pack), and a merge adds the change
// itself, (local - seen) / scale[h].
template <class Loss, bool kHasL1, bool kHasValues, class Header>
class SplitPass {
 public:
  using Step = RowStep<Loss, kHasL1, kHasValues>;

  // What the threads of one pass share.
  struct Shared {
    const char* buffer;
    int64_t dd, num_hot, sync_every, frequent_every;
    int64_t lines;        // of a record to prefetch (PrefetchLines())
    // ThreadSync::kFresh: each range merged every `every` rows (powers of
    // two dividing sync_every) instead of the two intervals above.
    const PackedRows::MergeRange* ranges;
    int64_t num_ranges;
    const double* scale;  // [num_hot + dd], sigma' of each private slot
    double* shared_hot;   // [num_hot + dd]
    double* w;            // the table (cold ids read and added here)
    double* duals;
  };

  // `phase`: rows counted as already solved since the last merge, so that
  // the threads' merges are spread over the interval instead of aligned.
  SplitPass(const Step& step, const Shared& shared, const int64_t* visit,
            int64_t count, int64_t phase)
      : step_(step),
        s_(shared),
        visit_(visit),
        count_(count),
        size_(shared.num_hot + shared.dd),
        frequent_(std::min<int64_t>(shared.num_hot,
                                    PackedRows::kFrequentHotIds)),
        local_(size_),
        seen_(size_),
        inv_scale_(size_),
        since_merge_(phase) {
    for (int64_t h = 0; h < size_; ++h) inv_scale_[h] = 1.0 / s_.scale[h];
  }

  int64_t count() const { return count_; }

  void Begin() { Merge(0, size_); }

  // Solves the k-th row of this thread's share. With kDeferShared the
  // change of the shared (cold) weights waits for ApplyDeferred, so that in
  // lockstep every thread's k-th step reads the table before any of them
  // writes it, as T truly parallel threads at the same speed do.
  template <bool kDeferShared = false>
  __attribute__((always_inline))
  inline void Visit(int64_t k) {
    // The hot weights are in this thread's copy: prefetch only cold ones.
    PrefetchAhead<Header>(s_.buffer, visit_, k, count_, s_.lines, s_.w,
                          s_.duals,
                          [](const Header* h) { return h->num_cold; });
    // The dense columns and the most frequent hot ids (hot indices are in
    // decreasing order of frequency) gather the other threads' changes
    // fastest: they are merged every `frequent_every` rows, all hot ids
    // every `sync_every` rows.
    MergeDue(s_.ranges, s_.num_ranges, s_.sync_every, s_.frequent_every,
             frequent_, s_.num_hot, size_, &since_merge_,
             [this](int64_t begin, int64_t end) { Merge(begin, end); });
    const auto [h, cold, nnz, ids, values, x] =
        SplitRecord<Header>(s_.buffer + visit_[k], kHasValues);
    const double s = h->weight;
    if (s <= 0.0) return;
    double* hot = local_.data();
    double* wd = hot + s_.num_hot;
    typename Step::Sums sums;
    step_.template AddSparse<SharedAccess>(ids, values, cold, s_.w, &sums);
    step_.template AddSparse<PlainAccess>(ids + cold, values + cold,
                                          nnz - cold, hot, &sums);
    step_.AddDense(x, s_.dd, wd, &sums);
    const double coef =
        step_.Update(h->label, s, h->norm, sums.Total(), s_.duals + h->row);
    if (coef == 0.0) return;
    if (kDeferShared) {
      deferred_ = {ids, values, cold, coef};
    } else {
      step_.template ApplySparse<SharedAccess>(ids, values, cold, coef, s_.w);
    }
    const double* scale = s_.scale;
    for (int64_t e = cold; e < nnz; ++e) {
      const int32_t j = ids[e];
      hot[j] += coef * scale[j] * (kHasValues ? values[e] : 1.0);
    }
    const double* scale_d = scale + s_.num_hot;
    for (int64_t c = 0; c < s_.dd; ++c) wd[c] += coef * scale_d[c] * x[c];
  }

  // Writes the shared weights' change held back by Visit<true>.
  void ApplyDeferred() {
    if (deferred_.coef == 0.0) return;
    step_.template ApplySparse<SharedAccess>(deferred_.ids, deferred_.values,
                                             deferred_.count, deferred_.coef,
                                             s_.w);
    deferred_.coef = 0.0;
  }

  void End() { Merge(0, size_); }

 private:
  struct Deferred {
    const int32_t* ids = nullptr;
    const float* values = nullptr;
    int64_t count = 0;
    double coef = 0.0;
  };

  // Adds this thread's change of private slots [begin, end) to the shared
  // values and takes theirs.
  void Merge(int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      const double change = (local_[h] - seen_[h]) * inv_scale_[h];
      if (change != 0.0) SharedAccess::Add(s_.shared_hot + h, change);
      local_[h] = seen_[h] = SharedAccess::Load(s_.shared_hot + h);
    }
  }

  const Step& step_;
  const Shared s_;
  const int64_t* const visit_;
  const int64_t count_;
  const int64_t size_, frequent_;
  // local_: this thread's view; seen_: the shared values at its last merge.
  std::vector<double> local_, seen_, inv_scale_;
  int64_t since_merge_;
  Deferred deferred_;
};

// One thread's share of a threaded pass of the multiclass losses
// (PackedRows::SolveBlocks with num_threads() > 1): SplitPass's scheme with
// a block of K class weights per slot. The cold ids' class rows are read
// with relaxed atomic loads and moved by atomic adds in the shared table;
// the private slots (hot ids, dense columns) live in this thread's
// [num_hot + dd, K] copy, merged as SplitPass merges them (every slot of a
// merge range moves its K classes together), with the same sigma' per
// slot (ThreadSync::kScaled) and the same raised row norms (the records'
// norms, whichever the mode), since a block step's q is the binary step's.
template <class Header>
class BlockSplitPass {
 public:
  struct Shared {
    const char* buffer;
    int64_t dd, num_hot, num_classes, sync_every, frequent_every;
    int64_t lines;  // of a record to prefetch (PrefetchLines())
    const PackedRows::MergeRange* ranges;
    int64_t num_ranges;
    const double* scale;  // [num_hot + dd], sigma' of each private slot
    double* shared_hot;   // [(num_hot + dd) * K]
    double* w;            // [num_slots * K]: cold ids read and added here
    double* duals;        // [n * K]
    double sigma, inv_l2, shrinkage;
    bool has_values;
  };

  BlockSplitPass(const MulticlassLoss& loss, const Shared& shared,
                 const int64_t* visit, int64_t count, int64_t phase)
      : loss_(loss),
        s_(shared),
        visit_(visit),
        count_(count),
        k_(shared.num_classes),
        size_(shared.num_hot + shared.dd),
        frequent_(std::min<int64_t>(shared.num_hot,
                                    PackedRows::kFrequentHotIds)),
        local_(size_ * k_),
        seen_(size_ * k_),
        z_(k_),
        next_(k_),
        delta_(k_),
        work_(4 * k_),
        since_merge_(phase) {
    changed_.reserve(k_);
  }

  int64_t count() const { return count_; }

  void Begin() { Merge(0, size_); }

  // Solves the k-th row of this thread's share; with kDeferShared the cold
  // ids' change waits for ApplyDeferred (lockstep, as SplitPass::Visit).
  template <bool kDeferShared = false>
  void Visit(int64_t k) {
    // The private slots are in this thread's copy: prefetch the cold ones.
    PrefetchAhead<Header>(s_.buffer, visit_, k, count_, s_.lines, s_.w,
                          s_.duals,
                          [](const Header* h) { return h->num_cold; }, k_);
    MergeDue(s_.ranges, s_.num_ranges, s_.sync_every, s_.frequent_every,
             frequent_, s_.num_hot, size_, &since_merge_,
             [this](int64_t begin, int64_t end) { Merge(begin, end); });
    const bool has_values = s_.has_values;
    const auto [h, cold, nnz, ids, values, x] =
        SplitRecord<Header>(s_.buffer + visit_[k], has_values);
    const double s = h->weight;
    if (s <= 0.0) return;
    // z = W^T x, the private slots from this thread's copy.
    std::fill(z_.begin(), z_.end(), 0.0);
    for (int64_t e = 0; e < nnz; ++e) {
      const double v = has_values ? values[e] : 1.0;
      if (e < cold) {
        const double* row = s_.w + static_cast<int64_t>(ids[e]) * k_;
        for (int64_t j = 0; j < k_; ++j) {
          z_[j] += v * Effective(SharedAccess::Load(row + j));
        }
      } else {
        const double* row = local_.data() + static_cast<int64_t>(ids[e]) * k_;
        for (int64_t j = 0; j < k_; ++j) z_[j] += v * Effective(row[j]);
      }
    }
    const double* dense_rows = local_.data() + s_.num_hot * k_;
    for (int64_t c = 0; c < s_.dd; ++c) {
      if (x[c] == 0.0f) continue;
      const double* row = dense_rows + c * k_;
      for (int64_t j = 0; j < k_; ++j) z_[j] += x[c] * Effective(row[j]);
    }
    const int label = static_cast<int>(h->label);
    double* alpha = s_.duals + h->row * k_;
    loss_.UpdateBlock(label, alpha, z_.data(), s_.sigma * s * h->norm *
                      s_.inv_l2, next_.data(), work_.data());
    changed_.clear();
    for (int64_t j = 0; j < k_; ++j) {
      const double change = next_[j] - alpha[j];
      if (change == 0.0) continue;
      delta_[j] = s_.sigma * s * change * s_.inv_l2;
      changed_.push_back(j);
      alpha[j] = next_[j];
    }
    if (changed_.empty()) return;
    if (kDeferShared) {
      deferred_ids_ = ids;
      deferred_values_ = values;
      deferred_count_ = cold;
      deferred_changed_ = changed_;
      deferred_delta_ = delta_;
    } else {
      ApplyCold(ids, values, cold, changed_, delta_);
    }
    const double* scale = s_.scale;
    for (int64_t e = cold; e < nnz; ++e) {
      const int64_t slot = ids[e];
      const double v = scale[slot] * (has_values ? values[e] : 1.0);
      double* row = local_.data() + slot * k_;
      for (const int64_t j : changed_) row[j] += v * delta_[j];
    }
    for (int64_t c = 0; c < s_.dd; ++c) {
      if (x[c] == 0.0f) continue;
      const double v = scale[s_.num_hot + c] * x[c];
      double* row = local_.data() + (s_.num_hot + c) * k_;
      for (const int64_t j : changed_) row[j] += v * delta_[j];
    }
  }

  void ApplyDeferred() {
    if (deferred_changed_.empty()) return;
    ApplyCold(deferred_ids_, deferred_values_, deferred_count_,
              deferred_changed_, deferred_delta_);
    deferred_changed_.clear();
  }

  void End() { Merge(0, size_); }

 private:
  double Effective(double w) const {
    return s_.shrinkage > 0.0 ? ShrinkL1(w, s_.shrinkage) : w;
  }

  void ApplyCold(const int32_t* ids, const float* values, int64_t cold,
                 const std::vector<int64_t>& changed,
                 const std::vector<double>& delta) const {
    for (int64_t e = 0; e < cold; ++e) {
      const double v = s_.has_values ? values[e] : 1.0;
      double* row = s_.w + static_cast<int64_t>(ids[e]) * k_;
      for (const int64_t j : changed) SharedAccess::Add(row + j, v * delta[j]);
    }
  }

  // Adds this thread's change of private slots [begin, end) (all K
  // classes) to the shared values and takes theirs.
  void Merge(int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      const double inv_scale = 1.0 / s_.scale[h];
      for (int64_t j = h * k_; j < (h + 1) * k_; ++j) {
        const double change = (local_[j] - seen_[j]) * inv_scale;
        if (change != 0.0) SharedAccess::Add(s_.shared_hot + j, change);
        local_[j] = seen_[j] = SharedAccess::Load(s_.shared_hot + j);
      }
    }
  }

  const MulticlassLoss& loss_;
  const Shared s_;
  const int64_t* const visit_;
  const int64_t count_, k_, size_, frequent_;
  std::vector<double> local_, seen_, z_, next_, delta_, work_;
  std::vector<int64_t> changed_;
  int64_t since_merge_;
  const int32_t* deferred_ids_ = nullptr;
  const float* deferred_values_ = nullptr;
  int64_t deferred_count_ = 0;
  std::vector<int64_t> deferred_changed_;
  std::vector<double> deferred_delta_;
};
// The rows in a random order for pass `pass` (the permutation order's
// stream, unused by the orders that draw), cut by the caller into the
// threads' shares: each thread then draws within a random share of the
// rows instead of a block of consecutive ones.
void RandomShares(uint64_t seed, int pass, int64_t n,
                  std::vector<int64_t>* rows) {
  rows->resize(n);
  Rng rng = PassRng(seed, 0, pass);
  FillVisitOrder(VisitOrder::kPermutation, 0, n, nullptr, &rng,
                 [](int64_t i) { return i; }, rows->data());
}
}  // namespace

void PackedRows::SolveSplit(const SolverOptions& options,
                            Interleave interleave, double* weights,
                            double* duals) const {
  const int64_t n = num_examples_;
  const int64_t threads = std::min<int64_t>(num_threads_, n);
  const int64_t num_hot = static_cast<int64_t>(hot_ids_.size());
  double* dense_weights = weights + num_sparse_features_;
  const double partitions = static_cast<double>(options.num_loss_partitions);
  const ParallelFor run_threads = StdThreadParallelFor(threads);
  auto first_row = [&](int64_t t) { return n * t / threads; };
  auto offset_of = [this](int64_t i) { return offsets_[i]; };
  WithPartitionScaling(options, num_slots(), weights, [&] {
    std::vector<int64_t> visit, rows;
    std::vector<double> scores, share_scores;
    std::vector<double> shared_hot(num_hot + dense_dim_);
    for (int pass = 0; pass < options.num_inner_iterations; ++pass) {
      if (options.Cancelled()) break;  // the hot weights are written back
      // Cyclic: the rows in order, without an order array.
      const int64_t* order = offsets_.data();
      if (options.order == VisitOrder::kPermutation ||
          options.order == VisitOrder::kShrinking) {
        // One permutation of all rows, cut into the threads' shares (the
        // threads do not shrink).
        visit.resize(n);
        Rng rng = PassRng(options.seed, 0, pass);
        FillVisitOrder(options.order, 0, n, nullptr, &rng, offset_of,
                       visit.data());
        order = visit.data();
      } else if (options.order != VisitOrder::kCyclic) {
        // Each thread draws within its own share of the rows, a random one
        // each pass (RandomShares): contiguous blocks of rows, on a data
        // set sorted by some feature or the label, made threads that run
        // one after another (a loaded machine) alternate between two
        // halves of it with their own optimum, and the gap fell 10-25x
        // slower per epoch than one thread's.
        RandomShares(options.seed, pass, n, &rows);
        if (options.order == VisitOrder::kAdaptive) {
          scores.resize(n);
          share_scores.resize(n);
          run_threads(threads, [&](int64_t t) {
            AdaptiveScores(options, weights, duals, first_row(t),
                           first_row(t + 1), scores.data());
          });
          for (int64_t j = 0; j < n; ++j) share_scores[j] = scores[rows[j]];
        }
        visit.resize(n);
        auto offset_at = [&](int64_t j) { return offsets_[rows[j]]; };
        for (int64_t t = 0; t < threads; ++t) {
          Rng rng = PassRng(options.seed, t + 1, pass);
          FillVisitOrder(options.order, first_row(t), first_row(t + 1),
                         share_scores.data(), &rng, offset_at,
                         visit.data() + first_row(t));
        }
        order = visit.data();
      }
      for (int64_t h = 0; h < num_hot; ++h) {
        shared_hot[h] = weights[hot_ids_[h]];
      }
      std::copy(dense_weights, dense_weights + dense_dim_,
                shared_hot.begin() + num_hot);
      Dispatch(options, has_values_,
               [&](const auto& loss, auto l1, auto values) {
                 using Loss = std::decay_t<decltype(loss)>;
                 using Pass = SplitPass<Loss, decltype(l1)::value,
                                        decltype(values)::value, SplitHeader>;
                 const typename Pass::Step step(loss, options, partitions);
                 const typename Pass::Shared shared{
                     buffer_.get(),         dense_dim_,
                     num_hot,               SyncInterval(),
                     FrequentSyncInterval(), PrefetchLines(),
                     merge_ranges_.data(),
                     static_cast<int64_t>(merge_ranges_.size()),
                     slot_scales_.data(),
                     shared_hot.data(),     weights,
                     duals};
                 std::vector<std::unique_ptr<Pass>> passes;
                 for (int64_t t = 0; t < threads; ++t) {
                   passes.push_back(std::make_unique<Pass>(
                       step, shared, order + first_row(t),
                       first_row(t + 1) - first_row(t),
                       SyncInterval() * t / threads));
                 }
                 RunShares(passes, interleave, options, run_threads);
               });
      for (int64_t h = 0; h < num_hot; ++h) {
        weights[hot_ids_[h]] = shared_hot[h];
      }
      std::copy(shared_hot.begin() + num_hot, shared_hot.end(),
                dense_weights);
    }
  });
}

void PackedRows::SolveBlocksSplit(const SolverOptions& options,
                                  const MulticlassLoss& loss,
                                  Interleave interleave, double* weights,
                                  double* duals) const {
  const int64_t n = num_examples_;
  const int64_t threads = std::min<int64_t>(num_threads_, n);
  const int64_t num_hot = static_cast<int64_t>(hot_ids_.size());
  const int64_t k = loss.num_classes();
  double* dense_weights = weights + num_sparse_features_ * k;
  const ParallelFor run_threads = StdThreadParallelFor(threads);
  auto first_row = [&](int64_t t) { return n * t / threads; };
  auto offset_of = [this](int64_t i) { return offsets_[i]; };
  using Pass = BlockSplitPass<SplitHeader>;
  WithPartitionScaling(options, num_slots() * k, weights, [&] {
    std::vector<int64_t> visit, rows;
    std::vector<double> shared_hot((num_hot + dense_dim_) * k);
    for (int pass = 0; pass < options.num_inner_iterations; ++pass) {
      if (options.Cancelled()) break;  // the hot weights are written back
      const int64_t* order = offsets_.data();  // kCyclic
      if (options.order == VisitOrder::kUniform) {
        // Within random shares of the rows, as SolveSplit's.
        RandomShares(options.seed, pass, n, &rows);
        auto offset_at = [&](int64_t j) { return offsets_[rows[j]]; };
        visit.resize(n);
        for (int64_t t = 0; t < threads; ++t) {
          Rng rng = PassRng(options.seed, t + 1, pass);
          FillVisitOrder(options.order, first_row(t), first_row(t + 1),
                         nullptr, &rng, offset_at,
                         visit.data() + first_row(t));
        }
        order = visit.data();
      } else if (options.order != VisitOrder::kCyclic) {
        // One permutation cut into the threads' shares ('shrinking' too:
        // the threads do not shrink).
        visit.resize(n);
        Rng rng = PassRng(options.seed, 0, pass);
        FillVisitOrder(VisitOrder::kPermutation, 0, n, nullptr, &rng,
                       offset_of, visit.data());
        order = visit.data();
      }
      for (int64_t h = 0; h < num_hot; ++h) {
        std::copy(weights + static_cast<int64_t>(hot_ids_[h]) * k,
                  weights + (static_cast<int64_t>(hot_ids_[h]) + 1) * k,
                  shared_hot.begin() + h * k);
      }
      std::copy(dense_weights, dense_weights + dense_dim_ * k,
                shared_hot.begin() + num_hot * k);
      const Pass::Shared shared{
          buffer_.get(),
          dense_dim_,
          num_hot,
          k,
          SyncInterval(),
          FrequentSyncInterval(),
          PrefetchLines(),
          merge_ranges_.data(),
          static_cast<int64_t>(merge_ranges_.size()),
          slot_scales_.data(),
          shared_hot.data(),
          weights,
          duals,
          static_cast<double>(options.num_loss_partitions),
          1.0 / options.l2,
          options.l1 / options.l2,
          has_values_};
      std::vector<std::unique_ptr<Pass>> passes;
      for (int64_t t = 0; t < threads; ++t) {
        passes.push_back(std::make_unique<Pass>(
            loss, shared, order + first_row(t),
            first_row(t + 1) - first_row(t), SyncInterval() * t / threads));
      }
      RunShares(passes, interleave, options, run_threads);
      for (int64_t h = 0; h < num_hot; ++h) {
        std::copy(shared_hot.begin() + h * k, shared_hot.begin() + (h + 1) * k,
                  weights + static_cast<int64_t>(hot_ids_[h]) * k);
      }
      std::copy(shared_hot.begin() + num_hot * k, shared_hot.end(),
                dense_weights);
    }
  });
}
}  // namespace tf_sdca
