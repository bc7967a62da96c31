#include "kernels/core/text_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

namespace tf_sdca {

namespace {

// tf.strings.to_hash_bucket_fast(x, 2^62): the fingerprint mod 2^62.
constexpr uint64_t kHashMod = (uint64_t{1} << 62) - 1;

// log1p of the small counts, computed once: most counts are small, and a
// table lookup is ~10x cheaper than std::log1p (the same value: the table
// holds std::log1p's results).
constexpr int kLog1pTable = 4096;

struct Log1pTable {
  float value[kLog1pTable];
  Log1pTable() {
    for (int k = 0; k < kLog1pTable; ++k) {
      value[k] = static_cast<float>(std::log1p(static_cast<double>(k)));
    }
  }
};

const Log1pTable& SmallLog1p() {
  static const Log1pTable* table = new Log1pTable();
  return *table;
}

// float32(log1p(float64(max(count, 0)))), as parse_criteo_lines computes it.
inline float DenseOfCount(int64_t count) {
  if (count <= 0) return 0.0f;
  if (count < kLog1pTable) return SmallLog1p().value[count];
  return static_cast<float>(std::log1p(static_cast<double>(count)));
}

// Byte classes of the Criteo fields, one table lookup per byte.
constexpr unsigned char kDigit = 1, kHex = 2;

struct ByteClasses {
  unsigned char of[256] = {};
  ByteClasses() {
    for (int c = '0'; c <= '9'; ++c) of[c] = kDigit | kHex;
    for (int c = 'a'; c <= 'f'; ++c) of[c] = of[c - 'a' + 'A'] = kHex;
  }
};

const ByteClasses& Classes() {
  static const ByteClasses* classes = new ByteClasses();
  return *classes;
}

// The first '\t' in [p, end), or end: eight bytes at a time (the lowest
// byte of a word that equals '\t' sets the lowest flagged bit; borrows only
// flag bytes above it). Little-endian: the lowest byte is the first.
inline const char* FindTab(const char* p, const char* end) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  while (end - p >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= kOnes * '\t';
    const uint64_t zero = (word - kOnes) & ~word & (kOnes << 7);
    if (zero) return p + (__builtin_ctzll(zero) >> 3);
    p += 8;
  }
  while (p < end && *p != '\t') ++p;
  return p;
}

// tf.strings.strip's whitespace (C's isspace).
inline bool IsAsciiSpace(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// Python's str.split's whitespace, in ASCII.
inline bool IsSpace(unsigned char c) {
  return IsAsciiSpace(c) || (c >= 0x1c && c <= 0x1f);
}

// A Criteo line that tf.strings.strip empties.
bool IsBlank(const char* begin, const char* end) {
  for (const char* p = begin; p < end; ++p) {
    if (!IsAsciiSpace(static_cast<unsigned char>(*p))) return false;
  }
  return true;
}

// Parses one Criteo line (no '\r', no '\n') into the row slots; false when
// it is malformed.
bool ParseCriteoLine(const char* p, const char* end, const CriteoHasher& h,
                     float* label, float* dense, int64_t* ids) {
  const unsigned char* of = Classes().of;
  if (end - p < 2 || (p[0] != '0' && p[0] != '1') || p[1] != '\t') {
    return false;
  }
  *label = p[0] == '1' ? 1.0f : 0.0f;
  p += 2;
  // Each field is [p, tab); the last ends the line.
  for (int j = 0; j < kCriteoIntegers; ++j) {
    const char* tab = FindTab(p, end);
    if (tab == end) return false;
    const bool negative = p < tab && *p == '-';
    const char* digits = p + negative;
    // An empty field is a missing count (0); "-" alone is not a number.
    if (tab - digits > 18 || (negative && digits == tab)) return false;
    int64_t count = 0;
    unsigned char all = kDigit;
    for (const char* q = digits; q < tab; ++q) {
      all &= of[static_cast<unsigned char>(*q)];
      count = count * 10 + (*q - '0');
    }
    if (!all) return false;
    dense[j] = negative ? 0.0f : DenseOfCount(count);
    p = tab + 1;
  }
  for (int j = 0; j < kCriteoCategories; ++j) {
    const char* tab = FindTab(p, end);
    if ((tab == end) != (j == kCriteoCategories - 1) || tab - p > 16) {
      return false;
    }
    unsigned char all = kHex;
    for (const char* q = p; q < tab; ++q) {
      all &= of[static_cast<unsigned char>(*q)];
    }
    if (!all) return false;
    const uint64_t fingerprint =
        h.hash(p, static_cast<size_t>(tab - p)) & kHashMod;
    // Both terms are < 2^62: the sum does not overflow.
    ids[j] = static_cast<int64_t>((fingerprint + h.offsets[j]) & h.mask);
    p = tab + 1;
  }
  return true;
}

// Python's int() of an ASCII token (sign, digits); false if it is not one
// or does not fit in int64.
bool ParseInteger(const char* p, const char* end, int64_t* out) {
  bool negative = false;
  if (p < end && (*p == '+' || *p == '-')) {
    negative = *p == '-';
    ++p;
  }
  if (p == end) return false;
  uint64_t value = 0;
  for (; p < end; ++p) {
    if (*p < '0' || *p > '9') return false;
    // Tested before the multiply, which would wrap past 2^64 (an index of
    // 18446744073709551620 read as 4, without a word).
    if (value > (uint64_t{1} << 62) / 10) return false;
    value = value * 10 + static_cast<uint64_t>(*p - '0');
    if (value > (uint64_t{1} << 62)) return false;
  }
  *out = negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  return true;
}

// Python's float() of an ASCII token (correctly rounded float64), finite
// also once rounded to float32 (the type rows are stored in).
bool ParseFinite(const char* p, const char* end, double* out) {
  if (p < end && *p == '+') {
    ++p;
    if (p < end && *p == '-') return false;  // "+-1"
  }
  if (p == end) return false;
  auto result = std::from_chars(p, end, *out);
  if (result.ec == std::errc::result_out_of_range && result.ptr == end) {
    // Overflow is +-inf (rejected), underflow a subnormal or zero: ask
    // strtod, which rounds these as Python does.
    *out = std::strtod(std::string(p, end).c_str(), nullptr);
  } else if (result.ec != std::errc() || result.ptr != end) {
    return false;
  }
  return std::isfinite(static_cast<float>(*out));
}

// Whether a line holding non-ASCII bytes would read as "not text (binary
// bytes)" (tf_sdca.data.text_files.is_binary): more than a quarter of its
// characters undecodable UTF-8. Each invalid byte counts as one
// replacement character, as Python's decoder counts it for stray bytes.
bool LooksBinary(const unsigned char* p, const unsigned char* end) {
  int64_t characters = 1;  // the line end, which Python's text keeps
  int64_t replaced = 0;
  while (p < end) {
    const unsigned char c = *p;
    int extra = c < 0x80 ? 0 : (c >= 0xC2 && c <= 0xDF) ? 1
              : (c >= 0xE0 && c <= 0xEF) ? 2 : (c >= 0xF0 && c <= 0xF4) ? 3
              : -1;
    ++characters;
    if (extra < 0) {
      ++replaced;
      ++p;
      continue;
    }
    int k = 1;
    while (k <= extra && p + k < end && (p[k] & 0xC0) == 0x80) ++k;
    if (k <= extra) ++replaced;
    p += k;
  }
  return replaced * 4 > characters;
}

// Parses one LIBSVM line into `out` (appending); false (and `out` as it
// was) when it is malformed. Sets *blank for a line without a row.
bool ParseLibsvmLine(const char* line, const char* end, LibsvmRows* out,
                     bool* blank) {
  *blank = false;
  const char* hash = static_cast<const char*>(
      std::memchr(line, '#', static_cast<size_t>(end - line)));
  const char* body_end = hash ? hash : end;
  const char* p = line;
  while (p < body_end && IsSpace(static_cast<unsigned char>(*p))) ++p;
  if (p == body_end) {
    *blank = true;
    return true;
  }
  if (std::memchr(line, '\0', static_cast<size_t>(end - line))) return false;
  for (const char* q = line; q < end; ++q) {
    if (static_cast<unsigned char>(*q) >= 0x80) {
      if (LooksBinary(reinterpret_cast<const unsigned char*>(line),
                      reinterpret_cast<const unsigned char*>(end))) {
        return false;
      }
      break;
    }
  }
  auto token_end = [body_end](const char* q) {
    while (q < body_end && !IsSpace(static_cast<unsigned char>(*q))) ++q;
    return q;
  };
  auto skip_space = [body_end](const char* q) {
    while (q < body_end && IsSpace(static_cast<unsigned char>(*q))) ++q;
    return q;
  };
  const char* label_end = token_end(p);
  double label;
  if (!ParseFinite(p, label_end, &label)) return false;
  p = skip_space(label_end);
  if (body_end - p >= 4 && std::memcmp(p, "qid:", 4) == 0) {
    p = skip_space(token_end(p));
  }
  const size_t first = out->indices.size();
  int64_t previous = 0;
  while (p < body_end) {
    const char* end_of_token = token_end(p);
    const char* colon = static_cast<const char*>(
        std::memchr(p, ':', static_cast<size_t>(end_of_token - p)));
    int64_t index;
    double value;
    // Indices are stored as int32 (index - 1) in the cache: < 2^31 + 1.
    if (colon == nullptr || !ParseInteger(p, colon, &index) ||
        !ParseFinite(colon + 1, end_of_token, &value) || index < 1 ||
        index <= previous || index > (int64_t{1} << 31)) {
      out->indices.resize(first);
      out->values.resize(first);
      return false;
    }
    previous = index;
    out->indices.push_back(index - 1);
    out->values.push_back(static_cast<float>(value));
    p = skip_space(end_of_token);
  }
  out->labels.push_back(static_cast<float>(label));
  out->lengths.push_back(static_cast<int64_t>(out->indices.size() - first));
  return true;
}

}  // namespace

std::vector<int64_t> SplitAtLines(const char* block, int64_t size,
                                  int parts, bool cr_ends) {
  std::vector<int64_t> bounds = {0};
  const char* end = block + size;
  for (int k = 1; k < parts; ++k) {
    int64_t at = std::max(bounds.back(), size * k / parts);
    if (at >= size) break;
    const char* newline = static_cast<const char*>(
        std::memchr(block + at, '\n', static_cast<size_t>(size - at)));
    const char* next = newline ? newline + 1 : nullptr;
    if (cr_ends) {  // the first line end: '\n', '\r\n' or a lone '\r'
      const char* limit = newline ? newline : end;
      const char* cr = static_cast<const char*>(std::memchr(
          block + at, '\r', static_cast<size_t>(limit - (block + at))));
      if (cr != nullptr) {
        next = (cr + 1 < end && cr[1] == '\n') ? cr + 2 : cr + 1;
      }
    }
    if (next == nullptr) break;
    at = next - block;
    if (at >= size) break;
    if (at > bounds.back()) bounds.push_back(at);
  }
  bounds.push_back(size);
  return bounds;
}

CriteoHasher::CriteoHasher(StringHash hash_function, int bucket_bits)
    : hash(hash_function),
      mask(bucket_bits >= 64 ? ~uint64_t{0}
                             : (uint64_t{1} << bucket_bits) - 1) {
  for (int j = 0; j < kCriteoCategories; ++j) {
    const std::string name = "C" + std::to_string(j + 1);
    offsets[j] = hash(name.data(), name.size()) & kHashMod;
  }
}

void ParseCriteo(const char* begin, const char* end, const char* block,
                 const CriteoHasher& hasher, CriteoRows* out) {
  const int64_t estimate = (end - begin) / 128 + 1;
  out->labels.reserve(estimate);
  out->dense.reserve(estimate * kCriteoIntegers);
  out->ids.reserve(estimate * kCriteoCategories);
  out->lines.reserve(estimate);
  std::string scratch;
  int64_t line = 0;
  for (const char* p = begin; p < end; ++line) {
    const char* newline = static_cast<const char*>(
        std::memchr(p, '\n', static_cast<size_t>(end - p)));
    const char* line_end = newline ? newline : end;
    const char* line_start = p;
    const char* text = p;
    const char* text_end = line_end;
    // TextLineDataset drops every '\r' of a line.
    if (std::memchr(p, '\r', static_cast<size_t>(line_end - p))) {
      scratch.clear();
      for (const char* q = p; q < line_end; ++q) {
        if (*q != '\r') scratch.push_back(*q);
      }
      text = scratch.data();
      text_end = text + scratch.size();
    }
    p = newline ? newline + 1 : end;
    const bool maybe_blank =
        text == text_end || IsAsciiSpace(static_cast<unsigned char>(*text));
    if (maybe_blank && IsBlank(text, text_end)) continue;
    const size_t row = out->labels.size();
    out->labels.push_back(0.0f);
    out->dense.resize(out->dense.size() + kCriteoIntegers);
    out->ids.resize(out->ids.size() + kCriteoCategories);
    if (ParseCriteoLine(text, text_end, hasher, &out->labels[row],
                        &out->dense[row * kCriteoIntegers],
                        &out->ids[row * kCriteoCategories])) {
      out->lines.push_back(line);
    } else {
      out->labels.pop_back();
      out->dense.resize(row * kCriteoIntegers);
      out->ids.resize(row * kCriteoCategories);
      out->bad.push_back({line, line_start - block, line_end - block});
    }
  }
  out->num_lines = line;
}

void ParseLibsvm(const char* begin, const char* end, const char* block,
                 LibsvmRows* out) {
  int64_t line = 0;
  // The next '\n' at or after p, found again only once p has passed it (a
  // file of lone '\r' ends has none: looking for it from every line scanned
  // the rest of the block each time, quadratic in the block's lines).
  const char* newline = nullptr;
  bool looked = false;
  for (const char* p = begin; p < end; ++line) {
    if (!looked || (newline != nullptr && newline < p)) {
      looked = true;
      newline = static_cast<const char*>(
          std::memchr(p, '\n', static_cast<size_t>(end - p)));
    }
    const char* line_end = newline ? newline : end;
    // Python's text files end a line at '\r' too ('\r\n' being one end).
    const char* cr = static_cast<const char*>(
        std::memchr(p, '\r', static_cast<size_t>(line_end - p)));
    const char* next;
    if (cr != nullptr) {
      line_end = cr;
      next = (cr + 1 < end && cr[1] == '\n') ? cr + 2 : cr + 1;
    } else {
      next = newline ? newline + 1 : end;
    }
    bool blank;
    if (!ParseLibsvmLine(p, line_end, out, &blank)) {
      out->bad.push_back({line, p - block, line_end - block});
    } else if (!blank) {
      out->lines.push_back(line);
    }
    p = next;
  }
  out->num_lines = line;
}

int64_t CountLines(const char* begin, const char* end) {
  int64_t lines = 0;
  for (const char* p = begin;
       (p = static_cast<const char*>(std::memchr(p, '\n', end - p))) !=
       nullptr;
       ++p) {
    ++lines;
  }
  return lines + (begin < end && end[-1] != '\n');
}

}  // namespace tf_sdca
