// Kernels of TfSdca>ParseCriteo and TfSdca>ParseLibsvm: a block of whole
// text lines parsed by kernels/core/text_reader on the CPU device's threads,
// one range of lines per thread, the ranges joined in order.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/core/text_reader.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"
#include "tensorflow/core/platform/denormal.h"
#include "tensorflow/core/platform/threadpool.h"

// FarmHash's Fingerprint64, which tf.strings.to_hash_bucket_fast applies
// (tsl::Fingerprint64 calls it). TensorFlow's framework library exports it,
// but its pip package ships no farmhash.h to declare it.
namespace util {
uint64_t Fingerprint64(const char* s, size_t len);
}  // namespace util

namespace tf_sdca {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {

// A range per thread, none under 256 KB (smaller ones cost more to
// schedule than to parse).
constexpr int64_t kMinRangeBytes = 1 << 18;

// Parses `text` in ranges on the device's threads; `parse(begin, end,
// block, rows)` fills one range's rows.
template <typename Rows, typename Parse>
std::vector<Rows> ParseRanges(OpKernelContext* context, const Tensor& bytes,
                              Parse parse) {
  auto* workers = context->device()->tensorflow_cpu_worker_threads();
  const char* text = reinterpret_cast<const char*>(
      bytes.flat<uint8_t>().data());
  const int64_t size = bytes.NumElements();
  const int parts = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(workers->num_threads, size / kMinRangeBytes)));
  const std::vector<int64_t> bounds = SplitAtLines(text, size, parts);
  const int ranges = static_cast<int>(bounds.size()) - 1;
  std::vector<Rows> rows(std::max(ranges, 0));
  auto run = [&](int64_t first, int64_t last) {
    // TensorFlow's threads flush float32 subnormals to zero; a value such as
    // 1e-40 must round to the float32 numpy gives.
    ::tensorflow::port::ScopedDontFlushDenormal keep_subnormals;
    for (int64_t k = first; k < last; ++k) {
      parse(text + bounds[k], text + bounds[k + 1], text, &rows[k]);
    }
  };
  if (ranges > 1) {
    // Cost per range large enough that each gets its own shard.
    workers->workers->ParallelFor(ranges, int64_t{1} << 30, run);
  } else if (ranges == 1) {
    run(0, 1);
  }
  return rows;
}

::tensorflow::Status CheckText(const Tensor& text) {
  if (!::tensorflow::TensorShapeUtils::IsVector(text.shape())) {
    return ::tensorflow::errors::InvalidArgument(
        "text must be a vector of bytes, got shape ",
        text.shape().DebugString());
  }
  return ::tensorflow::OkStatus();
}

// The row lines, bad lines and line count, shifted from range to block
// numbering; outputs `first`..`first + 3`.
template <typename Rows>
::tensorflow::Status WriteLines(OpKernelContext* context,
                                const std::vector<Rows>& rows, int first) {
  int64_t n = 0, k = 0;
  for (const Rows& r : rows) {
    n += r.lines.size();
    k += r.bad.size();
  }
  Tensor *lines, *bad_lines, *bad_bytes, *num_lines;
  TF_RETURN_IF_ERROR(
      context->allocate_output(first, TensorShape({n}), &lines));
  TF_RETURN_IF_ERROR(
      context->allocate_output(first + 1, TensorShape({k}), &bad_lines));
  TF_RETURN_IF_ERROR(
      context->allocate_output(first + 2, TensorShape({k, 2}), &bad_bytes));
  TF_RETURN_IF_ERROR(
      context->allocate_output(first + 3, TensorShape({}), &num_lines));
  int64_t* line_out = lines->flat<int64_t>().data();
  int64_t* bad_out = bad_lines->flat<int64_t>().data();
  int64_t* bytes_out = bad_bytes->flat<int64_t>().data();
  int64_t offset = 0;
  for (const Rows& r : rows) {
    for (int64_t line : r.lines) *line_out++ = line + offset;
    for (const BadLine& bad : r.bad) {
      *bad_out++ = bad.line + offset;
      *bytes_out++ = bad.begin;
      *bytes_out++ = bad.end;
    }
    offset += r.num_lines;
  }
  num_lines->scalar<int64_t>()() = offset;
  return ::tensorflow::OkStatus();
}

class ParseCriteoOp : public OpKernel {
 public:
  explicit ParseCriteoOp(OpKernelConstruction* context) : OpKernel(context) {
    int bucket_bits;
    OP_REQUIRES_OK(context, context->GetAttr("bucket_bits", &bucket_bits));
    OP_REQUIRES(context, bucket_bits <= 62,
                ::tensorflow::errors::InvalidArgument(
                    "bucket_bits must be in [1, 62], got ", bucket_bits));
    OP_REQUIRES_OK(context, context->GetAttr("ids_type", &ids_type_));
    OP_REQUIRES(context,
                ids_type_ != ::tensorflow::DT_INT32 || bucket_bits <= 31,
                ::tensorflow::errors::InvalidArgument(
                    "ids_type int32 holds ids of bucket_bits <= 31, got ",
                    bucket_bits));
    hasher_ = std::make_unique<CriteoHasher>(&util::Fingerprint64,
                                             bucket_bits);
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& text = context->input(0);
    OP_REQUIRES_OK(context, CheckText(text));
    const CriteoHasher& hasher = *hasher_;
    std::vector<CriteoRows> rows = ParseRanges<CriteoRows>(
        context, text,
        [&hasher](const char* begin, const char* end, const char* block,
                  CriteoRows* out) {
          // Room for every line at once: grown by doubling, the vectors
          // were copied ~twice over, into fresh pages each time.
          const int64_t lines = CountLines(begin, end);
          out->labels.reserve(lines);
          out->dense.reserve(lines * kCriteoIntegers);
          out->ids.reserve(lines * kCriteoCategories);
          out->lines.reserve(lines);
          ParseCriteo(begin, end, block, hasher, out);
        });
    int64_t n = 0;
    for (const CriteoRows& r : rows) n += r.labels.size();
    Tensor *labels, *dense, *ids;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, TensorShape({n}), &labels));
    OP_REQUIRES_OK(context, context->allocate_output(
                                1, TensorShape({n, kCriteoIntegers}), &dense));
    OP_REQUIRES_OK(context, context->allocate_output(
                                2, TensorShape({n, kCriteoCategories}), &ids));
    Join(rows, &CriteoRows::labels, labels->flat<float>().data());
    Join(rows, &CriteoRows::dense, dense->flat<float>().data());
    if (ids_type_ == ::tensorflow::DT_INT32) {
      // Exact: every id is below 2^bucket_bits <= 2^31.
      Join(rows, &CriteoRows::ids, ids->flat<int32_t>().data());
    } else {
      Join(rows, &CriteoRows::ids, ids->flat<int64_t>().data());
    }
    OP_REQUIRES_OK(context, WriteLines(context, rows, 3));
  }

 private:
  ::tensorflow::DataType ids_type_ = ::tensorflow::DT_INT64;
  std::unique_ptr<CriteoHasher> hasher_;
};

class ParseLibsvmOp : public OpKernel {
 public:
  explicit ParseLibsvmOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& text = context->input(0);
    OP_REQUIRES_OK(context, CheckText(text));
    std::vector<LibsvmRows> rows = ParseRanges<LibsvmRows>(
        context, text,
        [](const char* begin, const char* end, const char* block,
           LibsvmRows* out) { ParseLibsvm(begin, end, block, out); });
    int64_t n = 0, nnz = 0;
    for (const LibsvmRows& r : rows) {
      n += r.labels.size();
      nnz += r.indices.size();
    }
    Tensor *labels, *lengths, *indices, *values;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, TensorShape({n}), &labels));
    OP_REQUIRES_OK(context,
                   context->allocate_output(1, TensorShape({n}), &lengths));
    OP_REQUIRES_OK(context,
                   context->allocate_output(2, TensorShape({nnz}), &indices));
    OP_REQUIRES_OK(context,
                   context->allocate_output(3, TensorShape({nnz}), &values));
    Join(rows, &LibsvmRows::labels, labels->flat<float>().data());
    Join(rows, &LibsvmRows::lengths, lengths->flat<int64_t>().data());
    Join(rows, &LibsvmRows::indices, indices->flat<int64_t>().data());
    Join(rows, &LibsvmRows::values, values->flat<float>().data());
    OP_REQUIRES_OK(context, WriteLines(context, rows, 4));
  }
};

REGISTER_KERNEL_BUILDER(Name("TfSdca>ParseCriteo").Device(::tensorflow::DEVICE_CPU),
                        ParseCriteoOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ParseLibsvm").Device(::tensorflow::DEVICE_CPU),
                        ParseLibsvmOp);

}  // namespace
}  // namespace tf_sdca
