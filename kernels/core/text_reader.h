// Parsing of Criteo TSV and LIBSVM text into the arrays the cache stores,
// without TensorFlow. A block of whole lines is cut at line starts into one
// range per thread (SplitAtLines); each range is parsed on its own
// (ParseCriteo / ParseLibsvm) and the caller joins the ranges in order, so
// the rows come out in the file's order whatever the number of threads.
//
// The features are exactly those of tf_sdca/data/criteo.py's
// parse_criteo_lines (the TensorFlow graph that serving uses): the hash is
// passed in (TensorFlow's Fingerprint64, as tf.strings.to_hash_bucket_fast
// uses it), so this file needs no farmhash of its own.
//
// A malformed line is not an error here: it is recorded (its index and
// bytes) and skipped; the Python reader words the message (file, line,
// reason) and decides whether to raise or to count it (--skip-bad-lines).
#ifndef TF_SDCA_KERNELS_CORE_TEXT_READER_H_
#define TF_SDCA_KERNELS_CORE_TEXT_READER_H_

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <vector>

namespace tf_sdca {

// 64-bit string fingerprint (TensorFlow's FarmHash Fingerprint64).
using StringHash = uint64_t (*)(const char* data, size_t size);

constexpr int kCriteoIntegers = 13;
constexpr int kCriteoCategories = 26;

// A malformed line of a range: its 0-based index among the range's lines
// and its bytes [begin, end) within the block (line end excluded).
struct BadLine {
  int64_t line;
  int64_t begin;
  int64_t end;
};

// The rows of one range. `lines[r]` is row r's 0-based line index within
// the range; blank lines (whitespace only) give no row and are not bad.
struct CriteoRows {
  std::vector<float> labels;   // 0 or 1
  std::vector<float> dense;    // 13 per row: log1p(max(count, 0))
  std::vector<int64_t> ids;    // 26 per row, in [0, 2^bucket_bits)
  std::vector<int64_t> lines;
  std::vector<BadLine> bad;
  int64_t num_lines = 0;
};

struct LibsvmRows {
  std::vector<float> labels;
  std::vector<int64_t> lengths;  // non-zeros per row
  std::vector<int64_t> indices;  // 0-based, increasing within a row
  std::vector<float> values;
  std::vector<int64_t> lines;
  std::vector<BadLine> bad;
  int64_t num_lines = 0;
};

// Up to `parts` ranges [bounds[k], bounds[k + 1]) of [0, size) that start at
// line starts (after a '\n'; with `cr_ends` also after a lone '\r', as
// ParseLibsvm ends lines), of about equal size; bounds has parts + 1 entries
// or fewer (no empty range but for an empty block).
std::vector<int64_t> SplitAtLines(const char* block, int64_t size, int parts,
                                  bool cr_ends = false);

// Per-field hash offsets fingerprint("C1") .. fingerprint("C26") mod 2^62.
struct CriteoHasher {
  CriteoHasher(StringHash hash, int bucket_bits);
  StringHash hash;
  uint64_t mask;  // 2^bucket_bits - 1
  uint64_t offsets[kCriteoCategories];
};

// Criteo lines as TensorFlow's TextLineDataset cuts them: at '\n', every
// '\r' dropped. A line is the label 0 or 1, 13 decimal integers of up to 18
// digits with an optional '-', 26 hex tokens of up to 16 digits, any of the
// 39 possibly empty, separated by tabs.
void ParseCriteo(const char* begin, const char* end, const char* block,
                 const CriteoHasher& hasher, CriteoRows* out);

// LIBSVM lines as Python's text files cut them ('\n', '\r\n' or '\r'):
// `label [qid:N] index:value ...  [# comment]`, indices >= 1, increasing
// and <= 2^31, label and values plain ASCII decimal or scientific numbers
// read as Python's float() reads them (in float64; not its other spellings,
// such as '1_0'), rounded to float32 and finite there. Lines that hold nothing
// but whitespace and a comment give no row.
void ParseLibsvm(const char* begin, const char* end, const char* block,
                 LibsvmRows* out);

// The lines of [begin, end): its '\n's, and one more for a last line
// without one.
int64_t CountLines(const char* begin, const char* end);

// Copies each range's vector `member` into `out` (flat), in order,
// converted to Out.
template <typename Rows, typename T, typename Out>
void Join(const std::vector<Rows>& rows, std::vector<T> Rows::*member,
          Out* out) {
  for (const Rows& r : rows) {
    out = std::copy((r.*member).begin(), (r.*member).end(), out);
  }
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_TEXT_READER_H_
