// CPU kernels of TfSdca>ExampleKeys and TfSdca>DistinctIds: what SdcaModel
// computes from each streamed batch before the solve (the keys of its
// examples' dual state, the distinct feature ids whose weights the solve
// reads), each in one pass with its input check folded in. As TensorFlow
// ops they took ~10 ms of a ~47 ms step on 50k Criteo-shaped rows (fingerprint,
// key remap, tf.unique + assert for the uniqueness of the ids; DenseBincount,
// Where, Max + assert for the distinct ids and their range); see
// g3doc/benchmarks.md.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/fingerprint.h"
#include "kernels/kernels/kernel_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"

namespace tf_sdca {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
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

std::string Quoted(const tensorflow::tstring& s) {
  constexpr size_t kMax = 64;
  std::string out(s.data(), std::min(s.size(), kMax));
  return "'" + out + (s.size() > kMax ? "...'" : "'");
}

class ExampleKeysOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    const Tensor& in = context->input(0);
    OP_REQUIRES_OK(context, CheckRank(in, 1, "example_ids"));
    const int64_t n = in.dim_size(0);
    Tensor* out;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({n}), &out));
    auto ids = in.flat<tensorflow::tstring>();
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

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleKeys").Device(DEVICE_CPU),
                        ExampleKeysOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>DistinctIds").Device(DEVICE_CPU),
                        DistinctIdsOp);

}  // namespace tf_sdca
