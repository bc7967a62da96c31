// SdcaModel's per-example dual state: a resource mapping each example's
// int64 key (TfSdca>ExampleKeys) to its float32 state row (the K duals, then
// primal loss, dual loss and example weight), and the ops that read and
// write it.
//
// It replaced a tf.lookup.experimental.DenseHashTable whose find and insert
// took 3.1 and 3.8 ms of a ~34 ms step streaming 50k-row batches over 1M
// examples (here: 1.9 and 1.2 ms; g3doc/benchmarks.md): each lookup there
// is a dependent cache miss in the keys' tensor and another in the values'. Here a bucket
// holds its key and its row side by side (24 bytes for a width of 4), the
// batch's buckets are prefetched ahead of the probes, and ExampleStateFind
// returns where each key sits, so that the write after the solve goes
// straight to the bucket instead of hashing again.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernels/example_state_table.h"
#include "kernels/kernels/kernel_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"
#include "tensorflow/core/platform/mutex.h"

namespace tf_sdca {

using ::tensorflow::ContainerInfo;
using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::ResourceBase;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

namespace {

class ExampleStateResource : public ResourceBase {
 public:
  explicit ExampleStateResource(int64_t width) : table_(width) {}

  std::string DebugString() const override {
    ::tensorflow::tf_shared_lock lock(mu_);
    return "ExampleState(" + std::to_string(table_.size()) + " examples, " +
           std::to_string(table_.width()) + " floats each)";
  }
  int64_t MemoryUsed() const override {
    ::tensorflow::tf_shared_lock lock(mu_);
    return table_.bytes();
  }

  int64_t width() const { return table_.width(); }
  // The table, read under a shared lock of mu() and written under an
  // exclusive one.
  ::tensorflow::mutex* mu() const { return &mu_; }
  ExampleStateTable& table() { return table_; }
  const ExampleStateTable& shared_table() const { return table_; }

 private:
  mutable ::tensorflow::mutex mu_;
  ExampleStateTable table_;
};

// Keys an op may store: neither of the two reserved ones.
Status CheckKeys(const int64_t* keys, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (keys[i] <= kEmptyKey + 1) {
      return InvalidArgument("keys[", i, "] = ", keys[i],
                             " is reserved by the example-state table (keys "
                             "come from TfSdca>ExampleKeys, which moves these "
                             "two by +2)");
    }
  }
  return absl::OkStatus();
}

Status LookupTable(OpKernelContext* context,
                   ::tensorflow::core::RefCountPtr<ExampleStateResource>* out,
                   int64_t width) {
  TF_RETURN_IF_ERROR(::tensorflow::LookupResource(
      context, ::tensorflow::HandleFromInput(context, 0), out));
  if (width >= 0 && (*out)->width() != width) {
    return InvalidArgument("the example-state table keeps ", (*out)->width(),
                           " floats per example, not width = ", width);
  }
  return absl::OkStatus();
}

Status CheckRows(const Tensor& keys, const Tensor& values, int64_t width) {
  TF_RETURN_IF_ERROR(CheckRank(keys, 1, "keys"));
  TF_RETURN_IF_ERROR(CheckRank(values, 2, "values"));
  if (values.dim_size(0) != keys.dim_size(0) || values.dim_size(1) != width) {
    return InvalidArgument("values has shape ", values.shape().DebugString(),
                           "; expected [", keys.dim_size(0), ", ", width,
                           "] (a row of ", width, " for each of the keys)");
  }
  return CheckKeys(keys.flat<int64_t>().data(), keys.dim_size(0));
}

class ExampleStateTableOp : public OpKernel {
 public:
  explicit ExampleStateTableOp(OpKernelConstruction* context)
      : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("width", &width_));
  }

  void Compute(OpKernelContext* context) override {
    // The resource is named by the node (TF1 graphs: one table per graph
    // node, found again by every session.run) or by shared_name (eager:
    // the Python object gives a unique one).
    ContainerInfo cinfo;
    OP_REQUIRES_OK(context, cinfo.Init(context->resource_manager(), def(),
                                       /*use_node_name_as_default=*/true));
    ExampleStateResource* resource;
    OP_REQUIRES_OK(context,
                   cinfo.resource_manager()
                       ->LookupOrCreate<ExampleStateResource>(
                           cinfo.container(), cinfo.name(), &resource,
                           [this](ExampleStateResource** made) {
                             *made = new ExampleStateResource(width_);
                             return absl::OkStatus();
                           }));
    const int64_t width = resource->width();
    resource->Unref();
    OP_REQUIRES(context, width == width_,
                InvalidArgument("an example-state table named '", cinfo.name(),
                                "' already keeps ", width,
                                " floats per example, not width = ", width_));
    Tensor* out;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, TensorShape({}), &out));
    out->scalar<::tensorflow::ResourceHandle>()() =
        ::tensorflow::MakeResourceHandle<ExampleStateResource>(
            context, cinfo.container(), cinfo.name());
  }

 private:
  int64_t width_;
};

// An op whose `width` attribute states the table's width (for its shape
// function), checked against the table.
class WidthCheckedOp : public OpKernel {
 public:
  explicit WidthCheckedOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("width", &width_));
  }

 protected:
  int64_t width_;
};

class ExampleStateFindOp : public WidthCheckedOp {
 public:
  using WidthCheckedOp::WidthCheckedOp;

  void Compute(OpKernelContext* context) override {
    ::tensorflow::core::RefCountPtr<ExampleStateResource> resource;
    OP_REQUIRES_OK(context, LookupTable(context, &resource, width_));
    const Tensor& keys_in = context->input(1);
    OP_REQUIRES_OK(context, CheckRank(keys_in, 1, "keys"));
    const int64_t n = keys_in.dim_size(0);
    const int64_t* keys = keys_in.flat<int64_t>().data();
    Tensor* values_out;
    Tensor* slots_out;
    OP_REQUIRES_OK(context, context->allocate_output(
                                0, TensorShape({n, width_}), &values_out));
    OP_REQUIRES_OK(context,
                   context->allocate_output(1, TensorShape({n}), &slots_out));
    float* values = values_out->flat<float>().data();
    int64_t* slots = slots_out->flat<int64_t>().data();
    OP_REQUIRES_OK(context, CheckKeys(keys, n));
    ::tensorflow::tf_shared_lock lock(*resource->mu());
    const ExampleStateTable& table = resource->shared_table();
    table.FindAll(keys, n, values, slots);
  }
};

class ExampleStateWriteOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    ::tensorflow::core::RefCountPtr<ExampleStateResource> resource;
    OP_REQUIRES_OK(context, LookupTable(context, &resource, -1));
    const int64_t width = resource->width();
    const Tensor& keys_in = context->input(1);
    const Tensor& slots_in = context->input(2);
    const Tensor& values_in = context->input(3);
    OP_REQUIRES_OK(context, CheckRows(keys_in, values_in, width));
    OP_REQUIRES_OK(context, CheckRank(slots_in, 1, "slots"));
    const int64_t n = keys_in.dim_size(0);
    OP_REQUIRES(context,
                slots_in.dim_size(0) == n || slots_in.dim_size(0) == 0,
                InvalidArgument("slots has ", slots_in.dim_size(0),
                                " entries; expected ", n,
                                " (one per key) or 0 (none known)"));
    const int64_t* keys = keys_in.flat<int64_t>().data();
    const int64_t* slots =
        slots_in.dim_size(0) > 0 ? slots_in.flat<int64_t>().data() : nullptr;
    const float* values = values_in.flat<float>().data();
    ::tensorflow::mutex_lock lock(*resource->mu());
    ExampleStateTable& table = resource->table();
    table.WriteAll(keys, slots, n, values);
  }
};

class ExampleStateExportOp : public WidthCheckedOp {
 public:
  using WidthCheckedOp::WidthCheckedOp;

  void Compute(OpKernelContext* context) override {
    ::tensorflow::core::RefCountPtr<ExampleStateResource> resource;
    OP_REQUIRES_OK(context, LookupTable(context, &resource, width_));
    ::tensorflow::tf_shared_lock lock(*resource->mu());
    const ExampleStateTable& table = resource->shared_table();
    const int64_t m = table.size();
    Tensor* keys_out;
    Tensor* values_out;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, TensorShape({m}), &keys_out));
    OP_REQUIRES_OK(context, context->allocate_output(
                                1, TensorShape({m, width_}), &values_out));
    int64_t* keys = keys_out->flat<int64_t>().data();
    float* values = values_out->flat<float>().data();
    table.ForEach([&](int64_t key, const char* row) {
      *keys++ = key;
      std::memcpy(values, row, 4 * width_);
      values += width_;
    });
  }
};

class ExampleStateImportOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    ::tensorflow::core::RefCountPtr<ExampleStateResource> resource;
    OP_REQUIRES_OK(context, LookupTable(context, &resource, -1));
    const Tensor& keys_in = context->input(1);
    const Tensor& values_in = context->input(2);
    OP_REQUIRES_OK(context, CheckRows(keys_in, values_in, resource->width()));
    const int64_t n = keys_in.dim_size(0);
    const int64_t* keys = keys_in.flat<int64_t>().data();
    const float* values = values_in.flat<float>().data();
    ::tensorflow::mutex_lock lock(*resource->mu());
    ExampleStateTable& table = resource->table();
    table.Clear();
    table.WriteAll(keys, nullptr, n, values);
  }
};

class ExampleStateSizeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    ::tensorflow::core::RefCountPtr<ExampleStateResource> resource;
    OP_REQUIRES_OK(context, LookupTable(context, &resource, -1));
    Tensor* out;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}), &out));
    ::tensorflow::tf_shared_lock lock(*resource->mu());
    out->scalar<int64_t>()() = resource->shared_table().size();
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleStateTable").Device(DEVICE_CPU),
                        ExampleStateTableOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleStateFind").Device(DEVICE_CPU),
                        ExampleStateFindOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleStateWrite").Device(DEVICE_CPU),
                        ExampleStateWriteOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleStateExport").Device(DEVICE_CPU),
                        ExampleStateExportOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleStateImport").Device(DEVICE_CPU),
                        ExampleStateImportOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ExampleStateSize").Device(DEVICE_CPU),
                        ExampleStateSizeOp);

}  // namespace tf_sdca
