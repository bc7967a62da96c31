// A plain shared library (tf_sdca/_text_reader.so, no TensorFlow) over
// kernels/core/text_reader: a block of whole text lines parsed on a few
// threads, one range of lines per thread, the ranges joined in order. Its
// C functions are called through ctypes (tf_sdca/data/text_parser.py),
// which releases the GIL for each call, so `tf-sdca train` parses and
// writes its cache while TensorFlow is still being imported.
//
// A parse is two calls: TfSdca*Parse returns the rows held in C++ and
// their sizes; the caller allocates the arrays and TfSdca*Take copies the
// rows into them and frees the rows.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "kernels/core/text_reader.h"

namespace tf_sdca {
namespace {

// A range per thread, none under 256 KB (smaller ones cost more to start
// than to parse).
constexpr int64_t kMinRangeBytes = 1 << 18;

// Subnormal float32 values kept, not flushed to zero, on the thread that
// holds it (a LIBSVM value such as 1e-40 must round to the float32 numpy
// gives, whatever the calling thread's mode).
class KeepSubnormals {
 public:
#if defined(__SSE__)
  KeepSubnormals() : saved_(_mm_getcsr()) {
    _mm_setcsr(saved_ & ~(_MM_FLUSH_ZERO_ON | 0x0040u));  // FTZ, DAZ off
  }
  ~KeepSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
#endif
};

// Parses [text, text + size) in up to `threads` ranges, one per thread (the
// first on the calling one), cut at line ends as SplitAtLines' `cr_ends`;
// `parse(begin, end, block, rows)` fills one range's rows.
template <typename Rows, typename Parse>
std::vector<Rows> ParseRanges(const char* text, int64_t size, int threads,
                              bool cr_ends, Parse parse) {
  const int parts = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(threads, size / kMinRangeBytes)));
  const std::vector<int64_t> bounds =
      SplitAtLines(text, size, parts, cr_ends);
  const int ranges = static_cast<int>(bounds.size()) - 1;
  std::vector<Rows> rows(std::max(ranges, 0));
  auto run = [&](int k) {
    KeepSubnormals keep_subnormals;
    parse(text + bounds[k], text + bounds[k + 1], text, &rows[k]);
  };
  std::vector<std::thread> workers;
  for (int k = 1; k < ranges; ++k) workers.emplace_back(run, k);
  if (ranges > 0) run(0);
  for (std::thread& worker : workers) worker.join();
  return rows;
}

// The rows of a parsed block, range by range, and their totals:
// sizes[0] rows, [1] non-zeros (LIBSVM; 0 for Criteo), [2] bad lines,
// [3] lines.
template <typename Rows>
struct Parsed {
  std::vector<Rows> ranges;
  int64_t sizes[4] = {0, 0, 0, 0};
};

template <typename Rows>
void CountSizes(Parsed<Rows>* parsed) {
  for (const Rows& r : parsed->ranges) {
    parsed->sizes[0] += r.labels.size();
    parsed->sizes[2] += r.bad.size();
    parsed->sizes[3] += r.num_lines;
  }
}

// The rows' lines and the bad lines (index, then [begin, end) bytes),
// shifted from range to block numbering.
template <typename Rows>
void JoinLines(const std::vector<Rows>& rows, int64_t* lines,
               int64_t* bad_lines, int64_t* bad_bytes) {
  int64_t offset = 0;
  for (const Rows& r : rows) {
    for (int64_t line : r.lines) *lines++ = line + offset;
    for (const BadLine& bad : r.bad) {
      *bad_lines++ = bad.line + offset;
      *bad_bytes++ = bad.begin;
      *bad_bytes++ = bad.end;
    }
    offset += r.num_lines;
  }
}

}  // namespace
}  // namespace tf_sdca

using tf_sdca::CriteoRows;
using tf_sdca::LibsvmRows;
using tf_sdca::Parsed;

extern "C" {

// Criteo lines (tf_sdca::ParseCriteo) hashed with `hash` (TensorFlow's
// Fingerprint64) into 2^bucket_bits buckets (1..62, checked by the caller);
// `sizes` receives the totals (Parsed::sizes). Returns the rows for
// TfSdcaCriteoTake.
void* TfSdcaCriteoParse(const char* text, int64_t size, int bucket_bits,
                        tf_sdca::StringHash hash, int threads,
                        int64_t* sizes) {
  const tf_sdca::CriteoHasher hasher(hash, bucket_bits);
  auto* parsed = new Parsed<CriteoRows>;
  parsed->ranges = tf_sdca::ParseRanges<CriteoRows>(
      text, size, threads, /*cr_ends=*/false,
      [&hasher](const char* begin, const char* end, const char* block,
                CriteoRows* out) {
        // Room for every line at once: grown by doubling, the vectors
        // were copied ~twice over, into fresh pages each time.
        const int64_t lines = tf_sdca::CountLines(begin, end);
        out->labels.reserve(lines);
        out->dense.reserve(lines * tf_sdca::kCriteoIntegers);
        out->ids.reserve(lines * tf_sdca::kCriteoCategories);
        out->lines.reserve(lines);
        tf_sdca::ParseCriteo(begin, end, block, hasher, out);
      });
  tf_sdca::CountSizes(parsed);
  std::copy(parsed->sizes, parsed->sizes + 4, sizes);
  return parsed;
}

// Copies the rows of TfSdcaCriteoParse into the caller's arrays (`ids` as
// int32 if `ids_int32`, else int64; int32 holds every id of bucket_bits
// <= 31) and frees them.
void TfSdcaCriteoTake(void* rows, float* labels, float* dense, void* ids,
                      int ids_int32, int64_t* lines, int64_t* bad_lines,
                      int64_t* bad_bytes) {
  auto* parsed = static_cast<Parsed<CriteoRows>*>(rows);
  const auto& ranges = parsed->ranges;
  tf_sdca::Join(ranges, &CriteoRows::labels, labels);
  tf_sdca::Join(ranges, &CriteoRows::dense, dense);
  if (ids_int32) {
    tf_sdca::Join(ranges, &CriteoRows::ids, static_cast<int32_t*>(ids));
  } else {
    tf_sdca::Join(ranges, &CriteoRows::ids, static_cast<int64_t*>(ids));
  }
  tf_sdca::JoinLines(ranges, lines, bad_lines, bad_bytes);
  delete parsed;
}

// LIBSVM lines (tf_sdca::ParseLibsvm), as TfSdcaCriteoParse.
void* TfSdcaLibsvmParse(const char* text, int64_t size, int threads,
                        int64_t* sizes) {
  auto* parsed = new Parsed<LibsvmRows>;
  parsed->ranges = tf_sdca::ParseRanges<LibsvmRows>(
      text, size, threads, /*cr_ends=*/true,
      [](const char* begin, const char* end, const char* block,
         LibsvmRows* out) { tf_sdca::ParseLibsvm(begin, end, block, out); });
  tf_sdca::CountSizes(parsed);
  for (const LibsvmRows& r : parsed->ranges) {
    parsed->sizes[1] += r.indices.size();
  }
  std::copy(parsed->sizes, parsed->sizes + 4, sizes);
  return parsed;
}

// Copies the rows of TfSdcaLibsvmParse into the caller's arrays (indices
// int64) and frees them.
void TfSdcaLibsvmTake(void* rows, float* labels, int64_t* lengths,
                      int64_t* indices, float* values, int64_t* lines,
                      int64_t* bad_lines, int64_t* bad_bytes) {
  auto* parsed = static_cast<Parsed<LibsvmRows>*>(rows);
  const auto& ranges = parsed->ranges;
  tf_sdca::Join(ranges, &LibsvmRows::labels, labels);
  tf_sdca::Join(ranges, &LibsvmRows::lengths, lengths);
  tf_sdca::Join(ranges, &LibsvmRows::indices, indices);
  tf_sdca::Join(ranges, &LibsvmRows::values, values);
  tf_sdca::JoinLines(ranges, lines, bad_lines, bad_bytes);
  delete parsed;
}

}  // extern "C"
