// CPU kernels of TfSdca>ExampleKeys, TfSdca>DistinctIds and TfSdca>HoldRows:
// what SdcaModel computes from each streamed batch before the solve (the keys
// of its examples' dual state, the distinct feature ids whose weights the
// solve reads, the rows it visits now and those it holds back for the next
// call), each in one pass with its input check folded in. As TensorFlow
// ops they took ~10 ms of a ~47 ms step on 50k Criteo-shaped rows (fingerprint,
// key remap, tf.unique + assert for the uniqueness of the ids; DenseBincount,
// Where, Max + assert for the distinct ids and their range); see
// g3doc/benchmarks.md.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/fingerprint.h"
#include "kernels/core/first_bad_block.h"
#include "kernels/core/loss.h"
#include "kernels/core/multiclass_loss.h"
#include "kernels/core/random.h"
#include "kernels/kernels/kernel_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"

namespace tf_sdca {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernelContext;
using ::tensorflow::OpOutputList;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

namespace {

// The state table (a DenseHashTable) reserves its two lowest keys for empty
// and deleted buckets; an example fingerprinted to one of them is stored
// under that key + 2 (one more 64-bit collision, as likely as any other).
// Saved checkpoints hold these keys: never change the mapping.
constexpr int64_t kDeletedKey = INT64_MIN + 1;

int64_t TableKey(const tensorflow::tstring& id) {
  const int64_t low =
      static_cast<int64_t>(Fingerprint(id.data(), id.size()).low);
  return low <= kDeletedKey ? low + 2 : low;
}

// An integer id's key is that of its decimal text (what tf.strings.as_string
// gives), so that integer and string ids of one example share its dual.
int64_t TableKey(int64_t id) {
  char text[24];
  const auto end = std::to_chars(text, text + sizeof(text), id).ptr;
  const int64_t low = static_cast<int64_t>(Fingerprint(text, end - text).low);
  return low <= kDeletedKey ? low + 2 : low;
}

std::string Quoted(const tensorflow::tstring& s) {
  constexpr size_t kMax = 64;
  std::string out(s.data(), std::min(s.size(), kMax));
  return "'" + out + (s.size() > kMax ? "...'" : "'");
}

std::string Quoted(int64_t id) { return std::to_string(id); }

template <typename T>
class ExampleKeysOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    const Tensor& in = context->input(0);
    OP_REQUIRES_OK(context, CheckRank(in, 1, "example_ids"));
    const int64_t n = in.dim_size(0);
    Tensor* out;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({n}), &out));
    auto ids = in.flat<T>();
    int64_t* keys = out->flat<int64_t>().data();
    // Open addressing over positions (-1 empty), at most half full.
    uint64_t buckets = 16;
    while (buckets < 2 * static_cast<uint64_t>(n)) buckets <<= 1;
    const uint64_t mask = buckets - 1;
    std::vector<int64_t> at(buckets, -1);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t key = TableKey(ids(i));
      keys[i] = key;
      // The key is a fingerprint: its bits are already mixed.
      uint64_t h = static_cast<uint64_t>(key) & mask;
      while (at[h] >= 0) {
        if (keys[at[h]] == key) {
          context->CtxFailure(InvalidArgument(
              "example_ids must be unique within a batch: example_ids[", i,
              "] = ", Quoted(ids(i)), " has the key of example_ids[", at[h],
              "] = ", Quoted(ids(at[h])),
              " (two rows of one batch would share one dual)"));
          return;
        }
        h = (h + 1) & mask;
      }
      at[h] = i;
    }
  }
};

class DistinctIdsOp : public OpKernel {
 public:
  explicit DistinctIdsOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("num_rows", &num_rows_));
    OP_REQUIRES_OK(context, context->GetAttr("argument", &argument_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& in = context->input(0);
    OP_REQUIRES_OK(context, CheckRank(in, 1, argument_));
    const int64_t nnz = in.dim_size(0);
    const int64_t* ids = in.flat<int64_t>().data();
    // Marking rows in a bitmap of the table reads the table's bits once
    // (2^20 rows: 128 KiB, cached); a table much larger than the batch is
    // cheaper to sort the ids for. One thread: marking 1.3M ids took 1.4-1.5
    // ms, and the same split over two threads with a bitmap each (ORed
    // after) 1.5-1.6 ms.
    std::vector<int64_t> distinct;
    if (num_rows_ / 64 <= nnz + 1024) {
      const int64_t words = (num_rows_ + 63) / 64;
      std::vector<uint64_t> all(words, 0);
      for (int64_t k = 0; k < nnz; ++k) {
        const uint64_t id = static_cast<uint64_t>(ids[k]);
        // As uint64 a negative id is above every row: one compare.
        OP_REQUIRES(context, id < static_cast<uint64_t>(num_rows_),
                    OutOfRange(k, ids[k]));
        all[id >> 6] |= uint64_t{1} << (id & 63);
      }
      int64_t count = 0;
      for (const uint64_t word : all) count += __builtin_popcountll(word);
      Tensor* out;
      OP_REQUIRES_OK(context,
                     context->allocate_output(0, TensorShape({count}), &out));
      int64_t* dst = out->flat<int64_t>().data();
      for (int64_t w = 0; w < words; ++w) {
        for (uint64_t word = all[w]; word != 0; word &= word - 1) {
          *dst++ = w * 64 + __builtin_ctzll(word);
        }
      }
      return;
    }
    for (int64_t k = 0; k < nnz; ++k) {
      OP_REQUIRES(context,
                  static_cast<uint64_t>(ids[k]) <
                      static_cast<uint64_t>(num_rows_),
                  OutOfRange(k, ids[k]));
    }
    distinct.assign(ids, ids + nnz);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()),
                   distinct.end());
    Tensor* out;
    OP_REQUIRES_OK(context,
                   context->allocate_output(
                       0, TensorShape({static_cast<int64_t>(distinct.size())}),
                       &out));
    std::copy(distinct.begin(), distinct.end(), out->flat<int64_t>().data());
  }

 private:
  ::tensorflow::Status OutOfRange(int64_t k, int64_t id) const {
    return InvalidArgument(
        argument_, " has an id >= ", num_rows_,
        " or < 0, outside the rows of its weight variable: feature id [", k,
        "] = ", id);
  }

  int64_t num_rows_;
  std::string argument_;
};

// Output `position` of `shape` as T*; on failure the context fails (check
// context->status() before writing).
template <typename T>
T* AllocateOutput(OpKernelContext* context, int position,
                  const TensorShape& shape) {
  Tensor* t = nullptr;
  const ::tensorflow::Status status =
      context->allocate_output(position, shape, &t);
  if (!status.ok()) {
    context->CtxFailure(status);
    return nullptr;
  }
  return t->flat<T>().data();
}

// Where each row's entries start in `rows` (`size` example indices of `n`
// rows): row i's are start[i] .. start[i + 1] - 1. False when the indices
// are not nondecreasing within [0, n). (A chunk stops at the first index
// out of order or out of [0, n), before it writes a start for it: indices
// such as [0, 15, 3] of 5 rows pass the end checks.)
bool RowStarts(const int64_t* rows, int64_t size, int64_t n,
               const ParallelFor& parallel_for, int64_t chunks,
               std::vector<int64_t>* starts) {
  starts->assign(n + 1, 0);
  if (size == 0) return true;
  if (rows[0] < 0 || rows[size - 1] >= n) return false;
  int64_t* start = starts->data();
  std::vector<char> sorted(chunks, 1);
  parallel_for(chunks, [&](int64_t c) {
    // Each boundary between two rows is written by the chunk holding the
    // entry after it.
    for (int64_t e = std::max<int64_t>(size * c / chunks, 1),
                 hi = size * (c + 1) / chunks;
         e < hi; ++e) {
      const int64_t before = rows[e - 1], row = rows[e];
      if (row == before) continue;
      if (row < before || before < 0 || row >= n) {
        sorted[c] = 0;
        return;
      }
      for (int64_t q = before + 1; q <= row; ++q) start[q] = e;
    }
  });
  for (const char ok : sorted) {
    if (!ok) return false;
  }
  for (int64_t q = rows[size - 1] + 1; q <= n; ++q) start[q] = size;
  return true;
}

// SdcaModel's carry_over: merges the rows held back by the last call into
// the batch (a held row whose key is back in the batch is dropped: the
// batch's copy stands for it) and deals the merged rows into those visited
// now and floor(fraction * m) held for the next call, drawn from seed and
// call_index. In TensorFlow ops (unique, boolean masks, gathers, concats
// over every sparse entry) the same took ~100 ms of a 140 ms step on 50k
// Criteo-shaped rows.
class HoldRowsOp : public OpKernel {
 public:
  explicit HoldRowsOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("seed", &seed_));
    OP_REQUIRES_OK(context, context->GetAttr("values", &values_));
    int num_sparse;
    OP_REQUIRES_OK(context, context->GetAttr("num_sparse", &num_sparse));
    OP_REQUIRES(context, static_cast<int>(values_.size()) == num_sparse,
                InvalidArgument("values has ", values_.size(),
                                " entries, not num_sparse = ", num_sparse));
    std::string loss_type;
    OP_REQUIRES_OK(context, context->GetAttr("loss_type", &loss_type));
    int num_classes;
    OP_REQUIRES_OK(context, context->GetAttr("num_classes", &num_classes));
    if (!loss_type.empty()) {
      MulticlassLossType multiclass_type;
      LossType type;
      if (ParseMulticlassLossType(loss_type, &multiclass_type)) {
        OP_REQUIRES(context, num_classes >= 2,
                    InvalidArgument("num_classes = ", num_classes,
                                    " must be >= 2 for ", loss_type));
        multiclass_ = MakeMulticlassLoss(multiclass_type, num_classes);
      } else {
        OP_REQUIRES(context, ParseLossType(loss_type, &type),
                    InvalidArgument("unknown loss_type ", loss_type));
        loss_ = MakeLossUpdater(type, 1.0);  // (gamma: not in the domain)
      }
    }
    OP_REQUIRES_OK(context, context->GetAttr("id_limits", &id_limits_));
    OP_REQUIRES_OK(context,
                   context->GetAttr("id_arguments", &id_arguments_));
    OP_REQUIRES_OK(context,
                   context->GetAttr("dense_arguments", &dense_arguments_));
    int64_t num_dense;
    OP_REQUIRES_OK(context, context->GetAttr("num_dense", &num_dense));
    OP_REQUIRES(context,
                dense_arguments_.empty() ||
                    static_cast<int64_t>(dense_arguments_.size()) == num_dense,
                InvalidArgument("dense_arguments has ",
                                dense_arguments_.size(),
                                " entries: give none, or num_dense = ",
                                num_dense));
    OP_REQUIRES(
        context,
        id_limits_.empty() ||
            (static_cast<int>(id_limits_.size()) == num_sparse &&
             id_arguments_.size() == id_limits_.size()),
        InvalidArgument("id_limits has ", id_limits_.size(),
                        " and id_arguments ", id_arguments_.size(),
                        " entries: give none, or num_sparse = ", num_sparse,
                        " of each"));
  }

  void Compute(OpKernelContext* context) override {
    Side batch, held;
    OP_REQUIRES_OK(context, ReadSide(context, "", values_, &batch));
    OP_REQUIRES_OK(context, CheckBatch(batch));
    OP_REQUIRES_OK(context, ReadSide(context, "held_", values_, &held));
    const Tensor& call = context->input(context->num_inputs() - 2);
    OP_REQUIRES(context, ::tensorflow::TensorShapeUtils::IsScalar(call.shape()),
                InvalidArgument("call_index must be a scalar, got shape ",
                                call.shape().DebugString()));
    const Tensor& share = context->input(context->num_inputs() - 1);
    OP_REQUIRES(context,
                ::tensorflow::TensorShapeUtils::IsScalar(share.shape()),
                InvalidArgument("fraction must be a scalar, got shape ",
                                share.shape().DebugString()));
    const float fraction = share.scalar<float>()();
    OP_REQUIRES(context, fraction >= 0.0f && fraction < 1.0f,
                InvalidArgument("fraction = ", fraction,
                                " must be in [0, 1)"));
    OP_REQUIRES(context, batch.sparse_rows.size() == held.sparse_splits.size() &&
                             batch.dense.size() == held.dense.size(),
                InvalidArgument("the held rows have ", held.sparse_splits.size(),
                                " sparse and ", held.dense.size(),
                                " dense groups, the batch ",
                                batch.sparse_rows.size(), " and ",
                                batch.dense.size()));
    for (size_t g = 0; g < batch.dense.size(); ++g) {
      OP_REQUIRES(context,
                  batch.dense[g]->dim_size(1) == held.dense[g]->dim_size(1),
                  InvalidArgument("dense_features[", g, "] has ",
                                  batch.dense[g]->dim_size(1),
                                  " columns, the held rows' ",
                                  held.dense[g]->dim_size(1)));
    }
    const int64_t b = batch.n, h = held.n;
    // Merged rows: the batch's 0..b-1, then the kept held rows.
    std::vector<int64_t> held_at(h, -1);
    int64_t m = b;
    {
      // The batch's keys as a set: open addressing over the keys themselves
      // (one read per probe, prefetched ahead), INT64_MIN marking an empty
      // bucket (ExampleKeys never gives it; a batch holding it says so in
      // a flag), instead of positions into the keys (two dependent reads
      // per probe): 1.6 -> 1.3-1.4 ms for a 50k-row batch and 165k held
      // rows, in the loops of bench_sdca_model.py.
      constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();
      constexpr int64_t kAhead = 8;
      uint64_t buckets = 16;
      while (buckets < 2 * static_cast<uint64_t>(b)) buckets <<= 1;
      const uint64_t mask = buckets - 1;
      std::vector<int64_t> set(buckets, kEmpty);
      bool has_empty_key = false;
      const int64_t* keys = batch.keys;
      for (int64_t i = 0; i < b; ++i) {
        if (i + kAhead < b) {
          __builtin_prefetch(&set[static_cast<uint64_t>(keys[i + kAhead]) &
                                  mask]);
        }
        const int64_t key = keys[i];
        if (key == kEmpty) {
          has_empty_key = true;
          continue;
        }
        uint64_t slot = static_cast<uint64_t>(key) & mask;
        while (set[slot] != kEmpty && set[slot] != key) {
          slot = (slot + 1) & mask;
        }
        set[slot] = key;
      }
      for (int64_t i = 0; i < h; ++i) {
        if (i + kAhead < h) {
          __builtin_prefetch(
              &set[static_cast<uint64_t>(held.keys[i + kAhead]) & mask]);
        }
        const int64_t key = held.keys[i];
        bool back = key == kEmpty && has_empty_key;
        for (uint64_t slot = static_cast<uint64_t>(key) & mask;
             !back && set[slot] != kEmpty; slot = (slot + 1) & mask) {
          back = set[slot] == key;
        }
        if (!back) held_at[i] = m++;
      }
    }
    // floor(fraction * m) < m rows held: every call visits one.
    const int64_t k = static_cast<int64_t>(
        std::floor(static_cast<double>(fraction) * static_cast<double>(m)));
    Rng rng(MixSeed(static_cast<uint64_t>(seed_), 0x486f6c64526f7773ULL,
                    static_cast<uint64_t>(call.scalar<int64_t>()())));
    std::vector<char> hold(m, 0);
    auto draw = [&](auto* pick) {  // a partial Fisher-Yates shuffle
      pick->resize(m);
      for (int64_t r = 0; r < m; ++r) (*pick)[r] = r;
      for (int64_t j = 0; j < k; ++j) {
        std::swap((*pick)[j], (*pick)[j + rng.Below(m - j)]);
        hold[(*pick)[j]] = 1;
      }
    };
    // The same draw on int32 rows where they fit: half the memory to
    // shuffle (217k merged rows: 0.85 MiB, cache-resident).
    if (m <= std::numeric_limits<int32_t>::max()) {
      std::vector<int32_t> pick;
      draw(&pick);
    } else {
      std::vector<int64_t> pick;
      draw(&pick);
    }
    // Each merged row's index on its side.
    std::vector<int64_t> index(m);
    int64_t counts[2] = {0, 0};
    for (int64_t r = 0; r < m; ++r) index[r] = counts[hold[r]]++;
    // merged row of each source row (-1: dropped).
    auto merged = [&](bool from_held, int64_t i) {
      return from_held ? held_at[i] : i;
    };

    // Per-row outputs: keys, weights, labels, dense; visited first.
    const int num_sparse = static_cast<int>(batch.sparse_rows.size());
    const int num_dense = static_cast<int>(batch.dense.size());
    int64_t* out_keys[2];
    float* out_weights[2];
    float* out_labels[2];
    for (int side = 0; side < 2; ++side) {
      const int at = Position(side, 0, num_sparse, num_dense);
      const TensorShape shape({counts[side]});
      out_keys[side] = AllocateOutput<int64_t>(context, at, shape);
      out_weights[side] = AllocateOutput<float>(context, at + 1, shape);
      out_labels[side] = AllocateOutput<float>(context, at + 2, shape);
    }
    if (!context->status().ok()) return;
    for (int from_held = 0; from_held < 2; ++from_held) {
      const Side& src = from_held ? held : batch;
      for (int64_t i = 0; i < src.n; ++i) {
        const int64_t r = merged(from_held, i);
        if (r < 0) continue;
        const int side = hold[r];
        out_keys[side][index[r]] = src.keys[i];
        out_weights[side][index[r]] = src.weights[i];
        out_labels[side][index[r]] = src.labels[i];
      }
    }
    // Sparse groups. The held side keeps its rows as a CSR (row splits, each
    // row's entries contiguous, in row order): the op reads its rows' starts
    // from the splits and writes the held rows' splits, not an example
    // index per entry (~35 MB read and ~35 MB written a call for 'auto''s
    // ~167k held Criteo-shaped rows). The visited side is a COO batch, as
    // TfSdca>Optimizer takes it.
    auto* workers = context->device()->tensorflow_cpu_worker_threads();
    const ParallelFor parallel_for = DevicePool(context);
    // The held row behind each merged row b.. .
    std::vector<int64_t> held_of(m - b);
    for (int64_t i = 0; i < h; ++i) {
      if (held_at[i] >= 0) held_of[held_at[i] - b] = i;
    }
    std::vector<int64_t> batch_start, out_at;
    // Group g's sparse outputs: the visited side's example indices and the
    // held side's row splits, each side's ids and values (`entries` of
    // each; a group without values has none on either).
    auto allocate_sides = [&](int g, const int64_t* entries,
                              int64_t** rows_out, int64_t** ids_out,
                              float** values_out) {
      for (int side = 0; side < 2; ++side) {
        const int at = Position(side, 3, num_sparse, num_dense) + g;
        rows_out[side] = AllocateOutput<int64_t>(
            context, at,
            TensorShape({side == 0 ? entries[0] : counts[1] + 1}));
        const TensorShape shape({entries[side]});
        ids_out[side] = AllocateOutput<int64_t>(context, at + num_sparse,
                                                shape);
        values_out[side] = AllocateOutput<float>(
            context, at + 2 * num_sparse,
            TensorShape({values_[g] ? entries[side] : 0}));
      }
    };
    for (int g = 0; g < num_sparse; ++g) {
      const int64_t eb = batch.sparse_size[g];
      const int64_t* held_start = held.sparse_splits[g];
      const int64_t chunks = std::max<int64_t>(
          1, std::min<int64_t>(workers->num_threads, eb / 65536));
      int64_t* rows_out[2];
      int64_t* ids_out[2];
      float* values_out[2];
      // Runs: when the batch's example indices are nondecreasing (a batch
      // built row by row), each row's entries are one run on both sides,
      // written whole, in merged row order (2026-11-27, 50k Criteo-shaped
      // rows with 'auto''s 167k held: the entry-by-entry deal took 36 of a
      // 59 ms step). Indices out of order or out of range take the deal
      // below, which reports the first bad one.
      if (RowStarts(batch.sparse_rows[g], eb, b, parallel_for, chunks,
                    &batch_start)) {
        int64_t entries[2] = {0, 0};
        out_at.resize(m);
        for (int64_t r = 0; r < m; ++r) {
          const int64_t* start =
              r < b ? &batch_start[r] : &held_start[held_of[r - b]];
          out_at[r] = entries[hold[r]];
          entries[hold[r]] += start[1] - start[0];
        }
        allocate_sides(g, entries, rows_out, ids_out, values_out);
        if (!context->status().ok()) return;
        for (int64_t r = 0; r < m; ++r) {
          if (hold[r]) rows_out[1][index[r]] = out_at[r];
        }
        rows_out[1][counts[1]] = entries[1];
        const int64_t row_chunks = std::max<int64_t>(
            1, std::min<int64_t>(workers->num_threads, m / 4096));
        parallel_for(row_chunks, [&](int64_t c) {
          for (int64_t r = m * c / row_chunks; r < m * (c + 1) / row_chunks;
               ++r) {
            const bool from_held = r >= b;
            const int64_t i = from_held ? held_of[r - b] : r;
            const Side& src = from_held ? held : batch;
            const int64_t* start =
                from_held ? &held_start[i] : &batch_start[i];
            const int64_t lo = start[0], len = start[1] - start[0];
            const int side = hold[r];
            const int64_t j = out_at[r];
            if (side == 0) std::fill_n(rows_out[0] + j, len, index[r]);
            std::copy_n(src.sparse_ids[g] + lo, len, ids_out[side] + j);
            if (values_[g]) {
              std::copy_n(src.sparse_values[g] + lo, len,
                          values_out[side] + j);
            }
          }
        });
        continue;
      }
      // The deal (the batch's example indices in any order; a batch built
      // so is rare: one thread). Visited: the kept entries in input order,
      // the batch's then the held rows'. Held: each row's entries together
      // (its row's share of that order), rows in their held order.
      const int64_t* batch_rows = batch.sparse_rows[g];
      int64_t entries[2] = {0, 0};
      std::vector<int64_t> held_splits(counts[1] + 1, 0);
      for (int64_t e = 0; e < eb; ++e) {
        const int64_t row = batch_rows[e];
        if (static_cast<uint64_t>(row) >= static_cast<uint64_t>(b)) {
          context->CtxFailure(InvalidArgument(
              "sparse_example_indices[", g, "][", e, "] = ", row,
              " is not a row of the ", b, " examples"));
          return;
        }
        if (hold[row]) {
          ++held_splits[index[row] + 1];
        } else {
          ++entries[0];
        }
      }
      for (int64_t i = 0; i < h; ++i) {
        const int64_t r = held_at[i];
        if (r < 0) continue;
        const int64_t len = held_start[i + 1] - held_start[i];
        if (hold[r]) {
          held_splits[index[r] + 1] = len;
        } else {
          entries[0] += len;
        }
      }
      for (int64_t k = 0; k < counts[1]; ++k) {
        held_splits[k + 1] += held_splits[k];
      }
      entries[1] = held_splits[counts[1]];
      allocate_sides(g, entries, rows_out, ids_out, values_out);
      if (!context->status().ok()) return;
      std::copy(held_splits.begin(), held_splits.end(), rows_out[1]);
      std::vector<int64_t> next(held_splits.begin(), held_splits.end() - 1);
      int64_t j0 = 0;
      auto put = [&](int64_t r, int64_t id, float value) {
        const int64_t j = hold[r] ? next[index[r]]++ : j0++;
        if (!hold[r]) rows_out[0][j] = index[r];
        ids_out[hold[r]][j] = id;
        if (values_[g]) values_out[hold[r]][j] = value;
      };
      const float* batch_values = batch.sparse_values[g];
      for (int64_t e = 0; e < eb; ++e) {
        put(batch_rows[e], batch.sparse_ids[g][e],
            values_[g] ? batch_values[e] : 1.0f);
      }
      for (int64_t i = 0; i < h; ++i) {
        const int64_t r = held_at[i];
        if (r < 0) continue;
        for (int64_t e = held_start[i]; e < held_start[i + 1]; ++e) {
          put(r, held.sparse_ids[g][e],
              values_[g] ? held.sparse_values[g][e] : 1.0f);
        }
      }
    }
    for (int g = 0; g < num_dense; ++g) {
      const int64_t d = batch.dense[g]->dim_size(1);
      float* dense_out[2];
      for (int side = 0; side < 2; ++side) {
        dense_out[side] = AllocateOutput<float>(
            context, Position(side, 3, num_sparse, num_dense) +
                         3 * num_sparse + g,
            TensorShape({counts[side], d}));
      }
      if (!context->status().ok()) return;
      // By chunks of the source rows (the batch's, then the held ones), in
      // parallel: each row has its own place on its side.
      const float* x[2] = {batch.dense[g]->flat<float>().data(),
                           held.dense[g]->flat<float>().data()};
      const int64_t rows = b + h;
      const int64_t row_chunks = std::max<int64_t>(
          1, std::min<int64_t>(workers->num_threads, rows / 4096));
      parallel_for(row_chunks, [&](int64_t c) {
        for (int64_t e = rows * c / row_chunks;
             e < rows * (c + 1) / row_chunks; ++e) {
          const bool from_held = e >= b;
          const int64_t i = from_held ? e - b : e;
          const int64_t r = merged(from_held, i);
          if (r < 0) continue;
          const float* row = x[from_held] + i * d;
          std::copy(row, row + d, dense_out[hold[r]] + index[r] * d);
        }
      });
    }
  }

 private:
  // One side's inputs (the batch, or the held rows), checked.
  struct Side {
    int64_t n = 0;
    const int64_t* keys = nullptr;
    const float* weights = nullptr;
    const float* labels = nullptr;
    // Per sparse group: the batch's example indices (COO), or the held
    // rows' row splits (CSR, [n + 1]).
    std::vector<const int64_t*> sparse_rows, sparse_splits, sparse_ids;
    std::vector<const float*> sparse_values;
    std::vector<int64_t> sparse_size;
    std::vector<const Tensor*> dense;
  };

  // The held rows' row splits of one group: n + 1 offsets from 0 to the
  // group's `size` entries, nondecreasing.
  static ::tensorflow::Status CheckSplits(const Tensor& splits, int64_t n,
                                          int64_t size,
                                          const std::string& tag) {
    const std::string name = "held_sparse_row_splits" + tag;
    if (splits.dim_size(0) != n + 1) {
      return InvalidArgument(name, " must have the 1 + ", n,
                             " entries of the held rows' row splits, got "
                             "shape ", splits.shape().DebugString());
    }
    const int64_t* at = splits.flat<int64_t>().data();
    if (at[0] != 0 || at[n] != size) {
      return InvalidArgument(name, " must run from 0 to the ", size,
                             " entries of held_sparse_feature_indices", tag,
                             ", got ", at[0], " to ", at[n]);
    }
    for (int64_t i = 0; i < n; ++i) {
      if (at[i + 1] < at[i]) {
        return InvalidArgument(name, "[", i + 1, "] = ", at[i + 1],
                               " is below ", name, "[", i, "] = ", at[i]);
      }
    }
    return absl::OkStatus();
  }

  ::tensorflow::Status ReadSide(OpKernelContext* context,
                                const std::string& prefix,
                                const std::vector<bool>& has_values,
                                Side* side) const {
    const Tensor* keys;
    const Tensor* weights;
    const Tensor* labels;
    TF_RETURN_IF_ERROR(context->input(prefix + "keys", &keys));
    TF_RETURN_IF_ERROR(context->input(prefix + "example_weights", &weights));
    TF_RETURN_IF_ERROR(context->input(prefix + "example_labels", &labels));
    TF_RETURN_IF_ERROR(CheckRank(*keys, 1, prefix + "keys"));
    TF_RETURN_IF_ERROR(CheckRank(*weights, 1, prefix + "example_weights"));
    TF_RETURN_IF_ERROR(CheckRank(*labels, 1, prefix + "example_labels"));
    const int64_t n = keys->dim_size(0);
    if (weights->dim_size(0) != n || labels->dim_size(0) != n) {
      return InvalidArgument(prefix, "keys has ", n, " rows but ", prefix,
                             "example_weights ", weights->dim_size(0), " and ",
                             prefix, "example_labels ", labels->dim_size(0));
    }
    side->n = n;
    side->keys = keys->flat<int64_t>().data();
    side->weights = weights->flat<float>().data();
    side->labels = labels->flat<float>().data();
    // The batch's numbers are checked here, as the optimizer checks them,
    // so that a bad row is reported in the call (and at the row) the user
    // gave it, not when it comes out of the held rows. (Its labels and
    // feature ids, where the attrs give the loss and the weights' rows:
    // CheckBatch.) The held rows passed these checks in their own call.
    const bool check = prefix.empty();
    for (int64_t i = 0; check && i < n; ++i) {
      if (!(std::isfinite(side->weights[i]) && side->weights[i] >= 0)) {
        return InvalidArgument("example_weights[", i, "] = ", side->weights[i],
                               " must be finite and >= 0");
      }
    }
    OpInputList rows, ids, values, dense;
    // The batch's entries by example index; the held rows' by row splits.
    const std::string rows_name =
        check ? "sparse_example_indices" : "held_sparse_row_splits";
    TF_RETURN_IF_ERROR(context->input_list(rows_name, &rows));
    TF_RETURN_IF_ERROR(
        context->input_list(prefix + "sparse_feature_indices", &ids));
    TF_RETURN_IF_ERROR(
        context->input_list(prefix + "sparse_feature_values", &values));
    TF_RETURN_IF_ERROR(context->input_list(prefix + "dense_features", &dense));
    for (int g = 0; g < rows.size(); ++g) {
      const std::string tag = "[" + std::to_string(g) + "]";
      TF_RETURN_IF_ERROR(CheckRank(rows[g], 1, rows_name + tag));
      int64_t size;
      if (check) {
        size = rows[g].dim_size(0);
        if (ids[g].dims() != 1 || ids[g].dim_size(0) != size) {
          return InvalidArgument("sparse_feature_indices", tag,
                                 " must have the ", size, " entries of "
                                 "sparse_example_indices", tag,
                                 ", got shape ", ids[g].shape().DebugString());
        }
        side->sparse_rows.push_back(rows[g].flat<int64_t>().data());
      } else {
        TF_RETURN_IF_ERROR(
            CheckRank(ids[g], 1, "held_sparse_feature_indices" + tag));
        size = ids[g].dim_size(0);
        TF_RETURN_IF_ERROR(CheckSplits(rows[g], n, size, tag));
        side->sparse_splits.push_back(rows[g].flat<int64_t>().data());
      }
      // Values: one per entry, or none for a group without values (all 1).
      const int64_t num_values = has_values[g] ? size : 0;
      if (values[g].dims() != 1 || values[g].dim_size(0) != num_values) {
        return InvalidArgument(
            prefix, "sparse_feature_values", tag, " has shape ",
            values[g].shape().DebugString(), "; sparse group ", g,
            has_values[g] ? " has values: one per entry, " : " has no values: ",
            num_values, " (with carry_over, give values in every batch of a "
            "group or in none)");
      }
      // (The batch's example indices are checked where they are first read,
      // in Compute.)
      side->sparse_ids.push_back(ids[g].flat<int64_t>().data());
      side->sparse_values.push_back(
          has_values[g] ? values[g].flat<float>().data() : nullptr);
      if (check && has_values[g]) {
        TF_RETURN_IF_ERROR(CheckFinite(side->sparse_values.back(), size,
                                       "sparse_feature_values" + tag));
      }
      side->sparse_size.push_back(size);
    }
    for (int g = 0; g < dense.size(); ++g) {
      const std::string tag = "[" + std::to_string(g) + "]";
      // (The batch's group by the name its caller gave, where it gave one.)
      const std::string name = check && !dense_arguments_.empty()
                                   ? dense_arguments_[g]
                                   : prefix + "dense_features" + tag;
      TF_RETURN_IF_ERROR(CheckRank(dense[g], 2, name));
      if (dense[g].dim_size(0) != n) {
        return InvalidArgument(name, " has ", dense[g].dim_size(0),
                               " rows, not ", n);
      }
      if (check) {
        TF_RETURN_IF_ERROR(CheckFiniteMatrix(dense[g].flat<float>().data(),
                                             dense[g].dim_size(0),
                                             dense[g].dim_size(1), name));
      }
      side->dense.push_back(&dense[g]);
    }
    return absl::OkStatus();
  }

  // The batch's labels (in the loss's domain) and feature ids (rows of
  // their weight variables), where the attrs ask: the held rows passed
  // these checks in their own call, so a row is never held that would fail
  // the call visiting it.
  ::tensorflow::Status CheckBatch(const Side& batch) const {
    if (loss_ != nullptr || multiclass_ != nullptr) {
      double label;
      std::string why;
      for (int64_t i = 0; i < batch.n; ++i) {
        const float y = batch.labels[i];
        if (!(multiclass_ ? multiclass_->ConvertLabel(y, &label, &why)
                          : loss_->ConvertLabel(y, &label, &why))) {
          return InvalidArgument(
              "example_labels[", i, "] = ", y, " ", why, " for ",
              multiclass_ ? multiclass_->Name() : loss_->Name());
        }
      }
    }
    for (size_t g = 0; g < id_limits_.size(); ++g) {
      const uint64_t limit = static_cast<uint64_t>(id_limits_[g]);
      const int64_t* ids = batch.sparse_ids[g];
      const int64_t size = batch.sparse_size[g];
      // (As uint64 a negative id is above every limit.)
      auto bad = [&](int64_t k) {
        return static_cast<uint64_t>(ids[k]) >= limit;
      };
      for (int64_t k = FirstBadBlock(0, size, bad); k < size; ++k) {
        if (bad(k)) {
          return InvalidArgument(
              id_arguments_[g], " has an id >= ", id_limits_[g],
              " or < 0, outside the rows of its weight variable: feature "
              "id [", k, "] = ", ids[k]);
        }
      }
    }
    return absl::OkStatus();
  }

  // Output position of field f (0 keys, 1 weights, 2 labels, 3 the first
  // sparse example indices; then feature indices, values, dense) of a side
  // (0 visited, 1 held).
  static int Position(int side, int field, int num_sparse, int num_dense) {
    return side * (3 + 3 * num_sparse + num_dense) + field;
  }

  int64_t seed_;
  std::vector<bool> values_;  // per sparse group: whether it has values
  // The batch's checks beyond the optimizer's numbers (CheckBatch).
  std::unique_ptr<DualLossUpdater> loss_;
  std::unique_ptr<MulticlassLoss> multiclass_;
  std::vector<int64_t> id_limits_;
  std::vector<std::string> id_arguments_;
  std::vector<std::string> dense_arguments_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>HoldRows").Device(DEVICE_CPU),
                        HoldRowsOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleKeys")
                            .Device(DEVICE_CPU)
                            .TypeConstraint<tensorflow::tstring>("T"),
                        ExampleKeysOp<tensorflow::tstring>);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleKeys")
                            .Device(DEVICE_CPU)
                            .TypeConstraint<int64_t>("T"),
                        ExampleKeysOp<int64_t>);
REGISTER_KERNEL_BUILDER(Name("TfSdca>DistinctIds").Device(DEVICE_CPU),
                        DistinctIdsOp);

}  // namespace tf_sdca
