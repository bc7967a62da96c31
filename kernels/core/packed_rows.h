// The SDCA engine: rows packed into one record each, and the passes of one
// coordinate step over them (one thread, or lock-free threads sharing one
// weight table). Every door solves here: TfSdca>PackRows / PackedSolve (a
// data set packed once, one call per epoch: InMemorySdca, tf-sdca train)
// and TfSdca>Optimizer (each mini-batch packed per call, its ids mapped to
// slots of the batch's weights: SdcaModel, SDCAOptimizer, the Keras model).
// The weight vector is one table (sparse ids index it directly, dense
// columns follow), the duals a float64 array indexed by row. Independent of
// TensorFlow (kernels/tests/ drive it without TF).
#ifndef TF_SDCA_KERNELS_CORE_PACKED_ROWS_H_
#define TF_SDCA_KERNELS_CORE_PACKED_ROWS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/multiclass_loss.h"
#include "kernels/core/solver_options.h"

namespace tf_sdca {

// Non-owning view of a data set held in memory (the rows to pack). Row i's
// sparse entries are [row_ptr[i], row_ptr[i + 1]) of `ids` (and `values`,
// nullptr meaning all 1.0); its dense part is
// dense[i * dense_dim, (i + 1) * dense_dim). Weight slot of sparse id j is
// j, of dense column d is num_sparse_features + d. An id repeated in a row
// means the sum of its values (|x_i|^2 must count it so: PrepareResidentRows
// does).
struct ResidentData {
  int64_t num_examples = 0;
  int64_t num_sparse_features = 0;
  const int64_t* row_ptr = nullptr;  // [num_examples + 1], may be nullptr
                                     // when there are no sparse features
  const int32_t* ids = nullptr;
  const float* values = nullptr;
  const float* dense = nullptr;
  int64_t dense_dim = 0;
  const double* labels = nullptr;         // converted by the loss
  const float* example_weights = nullptr;  // >= 0
  const double* squared_norms = nullptr;  // |x_i|^2
  int64_t num_slots() const { return num_sparse_features + dense_dim; }
};

// Regularised objective parts at given weights and duals (all sums over
// examples weighted by s_i; weights shrunk by l1 / l2 first):
//   primal P(w) = primal_loss + l2/2 * l2_norm_sq + l1 * l1_norm
//   gap = P(w) - D(alpha) = primal_loss + dual_loss + l2 * l2_norm_sq
//                           + l1 * l1_norm   (>= 0)
struct ObjectiveParts {
  double primal_loss = 0.0;
  double dual_loss = 0.0;
  double l2_norm_sq = 0.0;
  double l1_norm = 0.0;
};

// Checks row_ptr: starts at 0, non-decreasing, ends at num_ids. On failure
// returns false and fills *error with the argument, position and value.
bool ValidateRowPtr(const ResidentData& data, int64_t num_ids,
                    std::string* error);

// For rows [begin, end): checks ids (in [0, num_sparse_features)), values
// and dense features (finite), and writes |x_i|^2 (repeated ids summed
// first) to norms[i]. Needs a valid row_ptr. Chunks of rows are independent.
bool PrepareResidentRows(const ResidentData& data, int64_t begin, int64_t end,
                         double* norms, std::string* error);

// The first i in [0, n) whose dual is not finite or outside the loss's dual
// domain for labels[i] (converted), or -1.
int64_t FirstInvalidDual(const double* duals, const double* labels,
                         int64_t n, const DualLossUpdater& loss);

// What TfSdca>Optimizer keeps of a solve besides the weights and duals: its
// example state is float32 and holds each example's losses.
struct StateRecord {
  // [num_examples] out: s_i phi_i(x_i . shrink(w)) at the weights row i's
  // last visit saw (rows no pass visited: at the weights after the passes,
  // before the CoCoA+ scaling); 0 for s_i <= 0.
  double* primal_losses = nullptr;
  // [num_examples] out: s_i phi_i*(-alpha_i) at the new duals; 0 for
  // s_i <= 0.
  double* dual_losses = nullptr;
  // Out: empty, or the first step (in visiting order) whose dual rounded to
  // float32, or whose weight change, is not finite: the loss, the row, the
  // step's inputs and its exact dual. The passes stop there; the weights,
  // duals and losses must not be used.
  std::string error;
  // Where the losses are computed after the passes, each row's on its own
  // (the same bits on any pool): `chunks` pieces through `parallel_for`
  // (none: one thread). The passes are one thread, so the other cores are
  // idle then; on 50k Criteo-shaped logistic rows two pieces took the op's
  // solve phase from a median 18.8 to 17.4 ms (2026-11-29, alternated).
  ParallelFor parallel_for;
  int64_t chunks = 1;
};

// Memory for the records of successive packs, kept from one to the next. A
// caller that packs a batch per call (TfSdca>Optimizer) lends it to each
// call's PackedRows (set_arena), which then writes its records into the
// arena's block instead of a fresh allocation: fresh pages cost a fault each
// on first touch, and on the project's VM a call packing 100k Criteo-shaped
// rows (19 MB) spent 25 ms of its ~80 in them (2.5 ms with the block
// reused). One PackedRows at a time may use an arena.
class RecordArena {
 public:
  RecordArena();
  ~RecordArena();
  RecordArena(const RecordArena&) = delete;
  RecordArena& operator=(const RecordArena&) = delete;
  // A block of at least `bytes`, valid until the next Take; nullptr when
  // memory runs out. Grows (a new block) only when `bytes` is more.
  char* Take(int64_t bytes);
  int64_t capacity() const { return capacity_; }

 private:
  char* block_ = nullptr;
  int64_t capacity_ = 0;
};

// The rows of a data set packed into one buffer: a data set packed once for
// many epochs (TfSdca>PackRows, TfSdca>PackedSolve) or a mini-batch packed
// for one call (TfSdca>Optimizer). Each row is one record in row order:
//   row index (int64) | |x_i|^2 (float64) | converted label (float64) |
//   example weight (float32) | nnz (int32) | nnz int32 ids |
//   [units (int32) | nnz - units float32 values] | dense_dim float32 |
//   padding to 8 bytes
// (192 bytes for a Criteo row of 26 ids and 14 dense values). With explicit
// values, the leading run of `units` entries whose value is 1.0f keeps no
// value (the values of a row's first entries, its one-hot ids in a scipy
// matrix that lists them before its counts, are all 1.0): 256 bytes instead
// of 352 for a Criteo row of 40 entries, 26 of them ids, as one CSR matrix.
// Every reader multiplies those entries by 1.0, as it multiplied the stored
// 1.0f, so the sums are the same bits. A step then
// reads one contiguous record (and its dual, duals[row], from an array of
// 8 bytes per row) instead of eight arrays at eight places: on 1M
// Criteo-shaped rows in a random order an epoch took ~0.6x the time of a
// pass over separate arrays (g3doc/op.md). Every pass takes the same
// coordinate step (RowStep in row_step.h) and the same visiting orders
// (visit_order.h).
//
// Packed for num_threads > 1, the rows are solved by that many threads at
// once over one shared weight table, lock-free: each thread takes a share
// of the pass's visiting order, and a row is visited by one thread only.
// The ids are split into "hot" ones (in at least 1/1024 of the rows, at most
// kMaxHotIds of them) and the dense columns, which nearly every row reads
// and writes and which every thread therefore keeps a private copy of,
// merged into the shared values by atomic adds (the dense ones and the 16
// most frequent hot ids every FrequentSyncInterval rows, all every
// SyncInterval rows); and "cold" ids, read with relaxed atomic loads and
// updated in the shared table by atomic adds. No update is lost: after a
// call the weights are the exact sum of the rows' changes (up to the order
// of floating-point adds, which depends on thread timing: results vary in
// the last bits from run to run).
//
// Between merges a thread does not see the others' changes of its private
// slots, and T threads that all move a weight shared by every row (an
// intercept, a dense column) move it T times as far as each expects: with
// T >= 3 truly parallel threads that overshoot kept the gap from falling.
// From three threads on (ThreadSync::kFresh, the default there) each slot is
// therefore merged about as often as the other threads change it (see
// ThreadSync). With two threads (kScaled), each private slot h is solved as
// in CoCoA+ with sigma' =
// slot_scales()[h] (1 + (T - 2) times the share of rows that use it within
// a merge interval: T - 1 for a column in every row, ~1 for a rare one; see
// ChooseSlotScales for why not T): the thread's copy holds
// the shared value plus scale times its own change, and the record's norm
// (which sets the step's q) counts the slot's x^2 scale times. The cold ids
// need no scale: their changes are seen at once. Such records put the cold
// ids first, then the hot ones as indices into hot_ids():
//   row (int64) | scaled |x_i|^2 | label | weight (float32) |
//   num_cold (int32) | num_hot (int32) | unused (int32) | cold ids |
//   hot indices | [values in the same order] | dense | padding
class PackedRows {
 public:
  static constexpr int64_t kMaxHotIds = 16384;
  static constexpr int64_t kFrequentHotIds = 16;

  // How the threads' private copies of the hot and dense weights keep up
  // with each other (num_threads > 1; set before Pack or Reserve).
  enum class ThreadSync {
    // The dense ones and the kFrequentHotIds most frequent hot ids merged
    // every FrequentSyncInterval() rows, all every SyncInterval() rows (at
    // least 16 rows), each private slot solved with CoCoA+'s sigma' (the
    // class comment). Cheap, but with 3 or more threads in lockstep (the
    // timing of truly parallel threads) far above one thread's gap after
    // the same epochs (g3doc/benchmarks.md): sigma' ~ T - 1 lands on nearly
    // every hot id of a Criteo row, so every step shrinks ~T - 1 times.
    kScaled,
    // Each private slot h merged every m_h rows, m_h the largest power of
    // two <= 8 / ((T - 1) rho_h) (rho_h: the share of rows using it), at
    // most kFreshSyncInterval: a step misses about 8 of the other threads'
    // changes of each slot, close to Hogwild's staleness, so no slot needs
    // sigma' (all 1); a row's norm is raised to T S_i / 2 where that is
    // larger (S_i = sum over its private slots of rho_h x_h^2: T steps at
    // once move the direction all rows share about T S_i / |x_i|^2 of a
    // full step each, and from 2 on they diverge). In lockstep within 1.7x
    // of one thread's gap after 20 epochs up to 8 threads (16: ~60x); two
    // real threads run at ~0.9x kScaled's rows/s (g3doc/benchmarks.md).
    kFresh,
    // kScaled with two threads (within 1.5x of one thread's gap in lockstep
    // and the faster), kFresh with three or more.
    kAuto,
  };
  static constexpr int64_t kFreshSyncInterval = 1024;
  // How the threads' shares of a pass run: on std::threads, in lockstep
  // (SolveLockstep) or one after another (SolveSequential).
  enum class Interleave { kThreads, kLockstep, kSequential };
  void set_thread_sync(ThreadSync sync) { requested_sync_ = sync; }
  // The mode the rows were packed for (kAuto resolved; kScaled with one
  // thread, where it does not matter).
  ThreadSync thread_sync() const { return thread_sync_; }
  // A run of private slots [begin, end) merged every `every` rows (kFresh).
  struct MergeRange {
    int64_t begin, end, every;
  };
  const std::vector<MergeRange>& merge_ranges() const { return merge_ranges_; }

  // Packs `data`, which must be valid (ValidateRowPtr, PrepareResidentRows)
  // with converted labels and squared norms, for Solve with `num_threads`
  // (>= 1) threads: Reserve, then one Append of every row. Rows are copied
  // in `chunks` pieces through `parallel_for`. Fails (false, *error) only
  // for a row longer than 2^31 - 1 entries or when memory runs out.
  bool Pack(const ResidentData& data, int num_threads, int64_t chunks,
            const ParallelFor& parallel_for, std::string* error);

  // Packing in pieces: a data set read chunk by chunk (e.g. from a
  // memory-mapped cache) need not be held whole beside its records. Reserve
  // takes the sizes of all the rows, then Append adds consecutive rows until
  // all num_examples are in; the rows can be solved only then. The records
  // are those Pack writes (Pack is Reserve and one Append), whatever the
  // pieces.
  struct Shape {
    int64_t num_examples = 0;
    int64_t num_sparse_features = 0;
    int64_t num_ids = 0;  // sparse entries of all the rows together
    int64_t dense_dim = 0;
    bool has_values = false;  // sparse entries carry values (else all 1.0)
  };
  // Allocates the records of `shape` (virtual memory: pages are touched
  // only as rows are appended) for Solve with `num_threads` threads. Fails
  // (false, *error) for a negative size or when memory runs out.
  bool Reserve(const Shape& shape, int num_threads, std::string* error);
  // Records of the next Reserve (or Pack) go into `arena`'s block (which
  // must outlive these rows, and serve no other rows meanwhile) instead
  // of memory of their own; nullptr: their own.
  void set_arena(RecordArena* arena) { arena_ = arena; }
  // Appends the rows of `data` (valid as for Pack; its row_ptr, if any,
  // starts at 0, and it has values exactly when the shape has, or no ids)
  // after the rows appended before. Fails (false, *error, nothing appended)
  // when `data` does not match the reserved shape, would exceed its rows or
  // ids, has a row longer than 2^31 - 1 entries, or completes the rows with
  // fewer ids than reserved. With more than one thread the records of the
  // layout below are written once the last row is in (their hot ids can be
  // chosen only from every row's ids).
  bool Append(const ResidentData& data, int64_t chunks,
              const ParallelFor& parallel_for, std::string* error);
  int64_t num_appended() const { return num_appended_; }
  // All reserved rows appended (Solve, Evaluate and CheckDuals need it).
  bool complete() const { return num_appended_ == num_examples_; }
  // Every row's label as the loss converted it (multiclass: the class id),
  // by row.
  const std::vector<double>& labels() const { return labels_; }

  int64_t num_examples() const { return num_examples_; }
  int64_t num_sparse_features() const { return num_sparse_features_; }
  int64_t dense_dim() const { return dense_dim_; }
  int64_t num_slots() const { return num_sparse_features_ + dense_dim_; }
  // Stored entries of all the rows: sparse ids and dense values.
  int64_t num_entries() const {
    return num_ids_ + num_examples_ * dense_dim_;
  }
  bool has_values() const { return has_values_; }
  int num_threads() const { return num_threads_; }
  // Hot index -> sparse id, most frequent first (empty with one thread).
  const std::vector<int32_t>& hot_ids() const { return hot_ids_; }
  // sigma' of the private slots [hot ids | dense columns] (empty with one
  // thread).
  const std::vector<double>& slot_scales() const { return slot_scales_; }
  // Rows a thread solves between merges of all its hot weights, and of the
  // dense ones and the kFrequentHotIds most frequent hot ids.
  int64_t SyncInterval() const;
  int64_t FrequentSyncInterval() const;
  // Cache lines of a record each pass prefetches ahead of its visit.
  int64_t PrefetchLines() const;
  // `weights` where a one-thread pass prefetches the weights of a row's ids
  // ahead of its visit (a table of num_slots() x `stride` doubles of at
  // least kPrefetchWeightsFrom bytes), else null (PrefetchAhead).
  const double* PrefetchWeights(const double* weights,
                                int64_t stride = 1) const;
  // Bytes held (records, row offsets, labels, hot ids).
  int64_t bytes() const;

  // Row i's record read in place, for solvers outside this class (ASDCA,
  // asdca.h); rows packed with one thread only (the split records of the
  // lock-free threads keep hot ids as indices).
  struct RowView {
    int64_t row;
    double norm;   // |x_i|^2
    double label;  // converted
    float weight;  // s_i
    int32_t nnz;
    const int32_t* ids;
    // nullptr: all 1.0; else values[e] for e >= units (Value).
    const float* values;
    const float* dense;   // [dense_dim()]
    int32_t units;  // the leading entries of value 1.0 (none stored)
    double Value(int64_t e) const {
      return values == nullptr || e < units ? 1.0 : values[e];
    }
  };
  RowView Row(int64_t i) const {
    const Header* h = reinterpret_cast<const Header*>(buffer_.get() +
                                                      offsets_[i]);
    const Entries entries =
        EntriesOf(reinterpret_cast<const char*>(h), has_values_);
    return {h->row, h->norm, h->label, h->weight, h->nnz, entries.ids,
            entries.values, entries.dense, entries.units};
  }
  // Asks the cache for row i's record (its first `lines` cache lines)
  // without reading it: a solver visiting rows in a random order issues it
  // a few rows ahead.
  void PrefetchRow(int64_t i, int lines) const {
    const char* p = buffer_.get() + offsets_[i];
    for (int line = 0; line < lines; ++line) __builtin_prefetch(p + 64 * line);
  }

  // False (and *error naming duals[i]) when duals[i] is not finite or
  // outside the loss's dual domain for row i's label.
  bool CheckDuals(const double* duals, const DualLossUpdater& loss,
                  std::string* error) const;

  // options.num_inner_iterations passes in options.order; `weights`
  // ([num_slots()], unshrunk) and `duals` ([n]) updated in place. With
  // num_loss_partitions = K > 1 the weights move by 1/K of the local solve's
  // change (CoCoA+ adding: the caller sums the changes of K workers). With
  // num_threads() > 1 the threads run on their own std::threads; each takes
  // a contiguous share of the pass's permutation (kPermutation), of the rows
  // in order (kCyclic), or draws with replacement from its own share of a
  // random permutation of the rows, new each pass (kUniform; kAdaptive with
  // the share's adaptive probabilities), so that no two threads update the
  // same dual.
  //
  // kShrinking (one thread; with threads it is kPermutation) visits fresh
  // permutations of the rows not shrunk, LIBLINEAR's shrinking for boxed
  // duals (see ShrinkingMarks), until they took n steps: a pass is n
  // steps' work, as in the other orders, spent on the rows that can still
  // move (on heart_scale, 270 rows, hinge, l2 = 1: 41 epochs to
  // LIBLINEAR's objective against 473 visiting every row once, the rows
  // out skipped). Which rows are shrunk carries over from
  // call to call on these rows, so a sequence of calls is reproducible from
  // its seeds, but a run resumed from saved duals takes another path to
  // the same optimum.
  //
  // With `record` (one thread only: TfSdca>Optimizer), every new dual is
  // rounded to float32 before the weights move by it, so that the weights
  // stay w(alpha) of the duals the op's float32 state stores; the rows'
  // losses are written to `record`, and the passes stop at the first step
  // whose dual or weight change is not finite (record->error).
  void Solve(const SolverOptions& options, double* weights, double* duals,
             StateRecord* record = nullptr) const;

  // Like Solve, but with num_threads() > 1 the threads' rows are visited on
  // the calling thread in lockstep: every thread's k-th step reads the
  // weights before any thread writes its k-th change, and all are written
  // before any (k + 1)-th step, so that each sees the others' changes as
  // late as truly parallel threads at the same speed do (the worst case of
  // real threads). Deterministic: for tests of convergence at any thread
  // count on a machine with fewer cores.
  void SolveLockstep(const SolverOptions& options, double* weights,
                     double* duals) const;

  // Like Solve, but with num_threads() > 1 the threads' shares of each pass
  // run one after another on the calling thread, each whole (Begin, its
  // rows, End): the timing of threads on a loaded machine, where each runs
  // its share within a time slice of its core while the other waits.
  // Deterministic: for tests that such timing converges as one thread does.
  void SolveSequential(const SolverOptions& options, double* weights,
                       double* duals) const;

  // The objective parts at (weights, duals). Rows are summed in blocks of
  // 16384, `chunks` runs of blocks through `parallel_for` (any pool: they
  // are independent), the blocks' sums added in order (so the result does
  // not depend on `chunks`).
  ObjectiveParts Evaluate(const SolverOptions& options, const double* weights,
                          const double* duals, int64_t chunks,
                          const ParallelFor& parallel_for) const;
  // Evaluate's dual_loss and l2_norm_sq alone (the same bits; its other
  // parts NaN), on this thread: the dual objective D = -dual_loss - l2/2
  // l2_norm_sq in O(n + slots), without the margins' gathers that make an
  // evaluation as long as a pass (what an extrapolation's restart test
  // reads). Binary losses (EvaluateBlocksDual: multiclass). With
  // `in_order` false the squares are summed in four interleaved sums (the
  // same value to rounding, not the same bits; several times faster on
  // 2^15 slots, where one chain of adds waits on each add).
  ObjectiveParts EvaluateDual(const SolverOptions& options,
                              const double* weights, const double* duals,
                              bool in_order = true) const;

  // The multiclass losses (multiclass_loss.h) on the same records, labels
  // converted by `loss` (class ids):
  // `weights` is the table [num_slots(), K] row-major (a slot's K class
  // weights contiguous), `duals` [n, K] row-major; options.loss is unused.
  // Each visit solves the row's whole block of K duals exactly and moves
  // only the class weights whose duals changed. The passes, visiting orders
  // ('permutation', 'uniform', 'cyclic') and CoCoA+ scaling are Solve's;
  // kShrinking, for a loss that is Shrinkable() (multiclass hinge), leaves
  // rows resting at a vertex of their simplex out of the passes, each pass
  // n steps over the rows left, as Solve's (packed_rows.cc says when).
  // Packed for num_threads() > 1, the threads solve their shares of the
  // pass lock-free as Solve's do, each private slot (hot id, dense column)
  // a row of K class weights in every thread's copy, merged and scaled as
  // there; 'shrinking' is then 'permutation'.
  // With `dual_error`, the duals after the passes are checked as
  // CheckBlockDuals does (*dual_error set for the first invalid block, left
  // alone if none): on one thread each block as it is written (the others
  // did not change), on threads in a sweep at the end.
  void SolveBlocks(const SolverOptions& options, const MulticlassLoss& loss,
                   double* weights, double* duals,
                   std::string* dual_error = nullptr) const;
  // SolveBlocks with the threads' rows in lockstep (as SolveLockstep).
  void SolveBlocksLockstep(const SolverOptions& options,
                           const MulticlassLoss& loss, double* weights,
                           double* duals) const;
  // SolveBlocks with the threads' shares one after another (as
  // SolveSequential).
  void SolveBlocksSequential(const SolverOptions& options,
                             const MulticlassLoss& loss, double* weights,
                             double* duals) const;
  // Evaluate for the multiclass losses: sums over rows of s_i phi_i(z_i)
  // and s_i phi_i*(-alpha_i), and the norms of the shrunk [num_slots(), K]
  // table.
  ObjectiveParts EvaluateBlocks(const SolverOptions& options,
                                const MulticlassLoss& loss,
                                const double* weights, const double* duals,
                                int64_t chunks,
                                const ParallelFor& parallel_for) const;
  // EvaluateBlocks' dual_loss and l2_norm_sq alone (its other parts NaN;
  // with `in_order`, the same bits), O(n K + slots K): EvaluateDual for the
  // multiclass losses.
  ObjectiveParts EvaluateBlocksDual(const SolverOptions& options,
                                    const MulticlassLoss& loss,
                                    const double* weights,
                                    const double* duals,
                                    bool in_order = true) const;
  // The weighted per-row terms of EvaluateBlocks: primal[i] = s_i
  // phi_i(W^T x_i), dual[i] = s_i phi_i*(-alpha_i) (0 for s_i = 0).
  void BlockRowLosses(const SolverOptions& options, const MulticlassLoss& loss,
                      const double* weights, const double* duals,
                      double* primal, double* dual) const;
  // weights[slot, k] += scale * s_i * x_i[slot] * change[i, k] for every row
  // i whose change is not zero: W moved by a change of the [n, K] duals
  // (scale = 1 / l2 keeps the unshrunk W = (1/l2) sum_i s_i x_i alpha_i^T).
  void AddBlockChanges(const double* change, int64_t num_classes, double scale,
                       double* weights) const;
  // CheckDuals for blocks: false (and *error naming the row, the class and
  // the row's label) when row i's block is not finite or not e_y - p with p
  // on the simplex.
  bool CheckBlockDuals(const double* duals, const MulticlassLoss& loss,
                       std::string* error) const;
  // CheckBlockDuals of `from` while copying it to `to`, in one sweep (each
  // block checked where it was just written); `to` is fully written only
  // when it returns true.
  bool CopyBlockDuals(const double* from, const MulticlassLoss& loss,
                      double* to, std::string* error) const;

  // What the order kShrinking carries from one solve on these rows to the
  // next (Hsieh et al., "A Dual Coordinate Descent Method for Large-scale
  // Linear SVM", ICML 2008, their Algorithm 3): a row whose dual sits at a
  // bound of its box and whose gradient G pushes it out by more than the
  // largest (smallest) projected gradient of the previous pass leaves the
  // visits; when the projected gradients of the rows still visited span
  // less than a tenth of those of the last pass over all rows, or after
  // 10 n steps without such a pass, every row comes back and the
  // thresholds are reset.
  struct ShrinkingMarks {
    std::vector<uint8_t> shrunk;  // [n]; empty until the first such pass
    // [n * K]: the classes of each row shrunk (a multiclass loss's
    // ClassShrinkable step), empty otherwise.
    std::vector<uint8_t> class_shrunk;
    // The largest row gap of the first pass after the classes came back,
    // and the steps since: every class comes back once the rows' largest
    // gap falls under a tenth of it, or after 3 n steps.
    double class_full_gap = 0.0;
    int64_t class_since_full = -1;  // -1: the classes just came back
    // The thresholds of the next pass (set with `shrunk`).
    double high = 0.0, low = 0.0;
    double full_spread = 0.0;  // max - min projected gradient, all rows
    // Steps since the last pass over all rows: after 10 n of them every row
    // comes back whatever the spread (a spread of the rows still visited
    // that cannot fall under a tenth of a stale full one, e.g. once the
    // duals were reset behind the state's back, must not trap them).
    int64_t since_full = 0;
  };
  // A copy of the marks (into *marks, reusing its memory), and the marks
  // put back: for a caller that may drop the epochs it solved and go back
  // to where they started (TfSdca>PackedEpochs trains an epoch while the
  // gap that decides whether it runs is evaluated).
  void SaveShrinking(ShrinkingMarks* marks) const;
  void RestoreShrinking(const ShrinkingMarks& marks) const;

 private:
  // sum_i s_i dual_loss(i, header_i) over the rows with s_i > 0, in the
  // order of Evaluate's and EvaluateBlocks' dual sums: row order within
  // blocks of kSumRows, the blocks' sums added in order to 0 (EvaluateDual
  // and EvaluateBlocksDual: the same bits).
  template <class DualLossOf>
  double DualLossInBlocks(const DualLossOf& dual_loss) const;

  struct Header {
    int64_t row;
    double norm;
    double label;
    float weight;
    int32_t nnz;
  };
  static_assert(sizeof(Header) == 32, "records start with 32 bytes");
 public:
  // A one-thread record's entries: ids[0, nnz); with values, entry e's
  // value is 1.0 for e < units, values[e] for e >= units (values points
  // `units` floats before the first one stored); without, values is null
  // and units nnz. `dense`: the record's dense part.
  struct Entries {
    const int32_t* ids;
    const float* values;
    int32_t units;
    const float* dense;
    double Value(int64_t e) const {
      return values == nullptr || e < units ? 1.0
                                            : static_cast<double>(values[e]);
    }
  };
  static Entries EntriesOf(const char* record, bool has_values) {
    const Header* h = reinterpret_cast<const Header*>(record);
    const int32_t* ids = reinterpret_cast<const int32_t*>(h + 1);
    const int32_t nnz = h->nnz;
    if (!has_values) {
      return {ids, nullptr, nnz, reinterpret_cast<const float*>(ids + nnz)};
    }
    const int32_t units = ids[nnz];
    const float* stored = reinterpret_cast<const float*>(ids + nnz + 1);
    return {ids, stored - units, units, stored + (nnz - units)};
  }

 private:
  // The record header for num_threads > 1 (see the class comment).
  struct SplitHeader {
    int64_t row;
    double norm;
    double label;
    float weight;
    int32_t num_cold;
    int32_t num_hot;
    int32_t unused;
  };
  static_assert(sizeof(SplitHeader) == 40, "split records: 40 bytes");

  // scores[i] = AdaptiveScore (visit_order.h) of row i for rows
  // [begin, end), at the unshrunk `weights` (hot slots read from the
  // table) and `duals`.
  void AdaptiveScores(const SolverOptions& options, const double* weights,
                      const double* duals, int64_t begin, int64_t end,
                      double* scores) const;
  // Calls fn(header, nnz, num_cold, row) for row i's record: its sparse
  // entries are nnz ids, the first num_cold table ids, the others indices
  // into hot_ids_.
  template <class Fn>
  void VisitRecord(int64_t i, const Fn& fn) const;
  // fn(row, x_j) for every feature j of the one-thread record at `record`
  // (sparse entries, then nonzero dense columns), `row` pointing at slot
  // j's K class weights in the [num_slots(), K] table `weights`.
  template <class Weight, class Fn>
  void ForEachClassRow(const char* record, int64_t num_classes,
                       Weight* weights, const Fn& fn) const;
  // z = W^T x of the one-thread record at `record`, W the [num_slots(),
  // num_classes] table shrunk by `shrinkage` on the fly.
  // BlockScores for K classes, no l1.
  template <int K>
  void FixedBlockScores(const char* record, const double* weights,
                        double* z) const;
  // FixedBlockScores of two one-thread records (shrinkage 0), their sums
  // side by side, each in its own order (the same bits): for
  // EvaluateBlocks, whose K accumulators per row wait on their adds.
  template <int K>
  void FixedBlockScoresPair(const char* a, const char* b,
                            const double* weights, double* za,
                            double* zb) const;
  // The pair for K in FixedBlockScores' list; false (nothing written)
  // for another K.
  bool BlockScoresPair(const char* a, const char* b, int64_t num_classes,
                       const double* weights, double* za, double* zb) const;
  // BlockScores of the `count` classes `active` only (the others' z not
  // written).
  void ActiveBlockScores(const char* record, int64_t num_classes,
                         const double* weights, double shrinkage,
                         const int* active, int count, double* z) const;
  void BlockScores(const char* record, int64_t num_classes,
                   const double* weights, double shrinkage, double* z) const;
  // x_i . shrink(w) of row i, shrinking by `shrinkage` on the fly.
  double Margin(int64_t i, const double* weights, double shrinkage) const;
  // Evaluate's row sums over rows [begin, end) of one-thread records, for
  // the concrete loss: kGroup rows' margins at a time, each summed in
  // Margin's order (the same bits), their add chains side by side.
  // With `norms` (all rows in one call), the norms' sums of Evaluate as
  // well, their add chains beside the rows' (the same order: the same
  // bits).
  template <class Loss, bool kHasL1, bool kHasValues>
  void RowLossesOneThread(const Loss& loss, const double* weights,
                          const double* duals, double shrinkage,
                          int64_t begin, int64_t end, double* primal,
                          double* dual, ObjectiveParts* norms) const;
  // The one-thread passes of Solve (with `record` as there).
  void SolveOneThread(const SolverOptions& options, double* weights,
                      double* duals, StateRecord* record) const;
  // Chooses hot_ids_ from id_counts_ (rows per id), and turns id_counts_
  // into the hot index of each id (-1: cold); *uses gets the rows using
  // each private slot [hot ids | dense columns].
  void ChooseHotIds(std::vector<int64_t>* uses);
  void SolveSplit(const SolverOptions& options, Interleave interleave,
                  double* weights, double* duals) const;
  void SolveBlocksSplit(const SolverOptions& options,
                        const MulticlassLoss& loss, Interleave interleave,
                        double* weights, double* duals) const;
  // SolveBlocksSplit with `interleave` on threads, SolveBlocks on one.
  void SolveBlocksInterleaved(const SolverOptions& options,
                              const MulticlassLoss& loss,
                              Interleave interleave, double* weights,
                              double* duals) const;
  // Fills slot_scales_ from the rows' use of each private slot.
  void ChooseSlotScales(const std::vector<int64_t>& uses);
  // Once every row is appended with num_threads > 1: chooses the hot ids
  // and the slot scales, and rewrites each record (appended with all its
  // ids cold) into the split layout.
  void SplitRecords(int64_t chunks, const ParallelFor& parallel_for);

  // The shrinking marks (ShrinkingMarks) and their lock.
  struct ShrinkingState : ShrinkingMarks {
    std::mutex mutex;  // one solve at a time uses the state
  };

  struct FreeBuffer {
    // (Constructors, not a default member initializer or argument: the
    // enclosing class is incomplete where buffer_ needs the default one.)
    FreeBuffer() : owned(true) {}
    explicit FreeBuffer(bool owned) : owned(owned) {}
    bool owned;  // false: an arena's block
    void operator()(char* p) const;
  };
  RecordArena* arena_ = nullptr;
  std::unique_ptr<char[], FreeBuffer> buffer_;
  int64_t buffer_bytes_ = 0;   // allocated (an upper bound until complete)
  int64_t records_end_ = 0;    // bytes of the records appended so far
  // Values of 1.0 the records appended so far keep none of (Entries).
  int64_t units_not_stored_ = 0;
  int64_t num_ids_ = 0;        // reserved sparse entries
  int64_t num_appended_ = 0;
  int64_t ids_appended_ = 0;
  // While appending with num_threads > 1: rows per sparse id (saturating)
  // and per dense column (non-zero), for ChooseHotIds.
  std::vector<int32_t> id_counts_;
  std::vector<int64_t> dense_uses_;
  std::vector<int64_t> offsets_;  // byte offset of row i's record
  std::vector<double> labels_;    // converted, for CheckDuals
  int64_t num_examples_ = 0;
  int64_t num_sparse_features_ = 0;
  int64_t dense_dim_ = 0;
  bool has_values_ = false;
  int num_threads_ = 1;
  std::vector<int32_t> hot_ids_;
  std::vector<double> slot_scales_;
  ThreadSync requested_sync_ = ThreadSync::kAuto;
  ThreadSync thread_sync_ = ThreadSync::kScaled;
  std::vector<MergeRange> merge_ranges_;  // kFresh: by merge interval
  mutable std::unique_ptr<ShrinkingState> shrinking_ =
      std::make_unique<ShrinkingState>();
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_PACKED_ROWS_H_
