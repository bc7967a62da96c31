// The text parsers (kernels/core/text_reader) on seeded, mutated Criteo and
// LIBSVM text: each block is parsed whole and cut into 2..5 ranges, and the
// joined ranges must equal the whole parse; every row, id and bad-line
// range must lie where it should. Run under ASan + UBSan by
// tests/test_core_sanitizers.py: each block is its own exact-size
// allocation, so a read past its end is reported. Prints "OK".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/text_reader.h"

namespace {

// A stand-in for FarmHash (the core takes the hash as a function): FNV-1a.
uint64_t Fnv(const char* data, size_t size) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t k = 0; k < size; ++k) {
    h = (h ^ static_cast<unsigned char>(data[k])) * 1099511628211ULL;
  }
  return h;
}

#define CHECK(condition)                                               \
  do {                                                                 \
    if (!(condition)) {                                                \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,      \
                   __LINE__, #condition);                              \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

std::string CriteoLine(std::mt19937_64& rng) {
  std::string line = rng() % 2 ? "1" : "0";
  for (int j = 0; j < 13; ++j) {
    line += '\t';
    if (rng() % 4) {
      line += std::to_string(static_cast<int64_t>(rng() % 100000) - 2);
    }
  }
  for (int j = 0; j < 26; ++j) {
    line += '\t';
    char token[17];
    std::snprintf(token, sizeof(token), "%08llx",
                  static_cast<unsigned long long>(rng() % 0xFFFFFFFFULL));
    if (rng() % 5) line += token;
  }
  return line;
}

std::string LibsvmLine(std::mt19937_64& rng) {
  std::string line = rng() % 2 ? "+1" : "-1";
  if (rng() % 10 == 0) line += " qid:3";
  int64_t index = 0;
  for (int k = static_cast<int>(rng() % 8); k > 0; --k) {
    index += 1 + static_cast<int64_t>(rng() % 50);
    char value[40];
    std::snprintf(value, sizeof(value), "%.9g",
                  std::ldexp(static_cast<double>(rng() % 1000) - 500,
                             static_cast<int>(rng() % 300) - 150));
    line += " " + std::to_string(index) + ":" + value;
  }
  if (rng() % 7 == 0) line += " # comment";
  return line;
}

// Damages a line: a byte changed, inserted or removed, a cut, binary bytes.
void Mutate(std::string* line, std::mt19937_64& rng) {
  static const char kBytes[] = "\t\r\n :#-+.e0129aAfFxz\x00\x80\xff";
  const size_t at = line->empty() ? 0 : rng() % line->size();
  const char byte = kBytes[rng() % (sizeof(kBytes) - 1)];
  switch (rng() % 5) {
    case 0: if (!line->empty()) (*line)[at] = byte; break;
    case 1: line->insert(line->begin() + at, byte); break;
    case 2: if (!line->empty()) line->erase(at, 1); break;
    case 3: line->resize(at); break;
    default: line->append(std::string(rng() % 40, byte)); break;
  }
}

template <typename Rows>
void CheckCommon(const Rows& rows, int64_t size) {
  for (const tf_sdca::BadLine& bad : rows.bad) {
    CHECK(0 <= bad.begin && bad.begin <= bad.end && bad.end <= size);
    CHECK(0 <= bad.line && bad.line < rows.num_lines);
  }
  for (size_t r = 1; r < rows.lines.size(); ++r) {
    CHECK(rows.lines[r - 1] < rows.lines[r]);
  }
}

// Parses [0, size) whole and in `parts` ranges and compares.
void CheckBlock(const char* block, int64_t size, int parts,
                const tf_sdca::CriteoHasher& hasher) {
  tf_sdca::CriteoRows whole;
  tf_sdca::ParseCriteo(block, block + size, block, hasher, &whole);
  CheckCommon(whole, size);
  CHECK(whole.dense.size() == whole.labels.size() * 13);
  CHECK(whole.ids.size() == whole.labels.size() * 26);
  for (int64_t id : whole.ids) CHECK(id >= 0 && id < (1 << 18));
  tf_sdca::LibsvmRows svm;
  tf_sdca::ParseLibsvm(block, block + size, block, &svm);
  CheckCommon(svm, size);
  int64_t nnz = 0;
  for (int64_t length : svm.lengths) nnz += length;
  CHECK(nnz == static_cast<int64_t>(svm.indices.size()));
  CHECK(svm.values.size() == svm.indices.size());

  const std::vector<int64_t> bounds =
      tf_sdca::SplitAtLines(block, size, parts);
  CHECK(bounds.front() == 0 && bounds.back() == size);
  std::vector<float> labels, dense;
  std::vector<int64_t> ids, lines, bad_lines;
  int64_t offset = 0;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    CHECK(bounds[k] < bounds[k + 1] || size == 0);
    if (k > 0) CHECK(block[bounds[k] - 1] == '\n');
    tf_sdca::CriteoRows range;
    tf_sdca::ParseCriteo(block + bounds[k], block + bounds[k + 1], block,
                         hasher, &range);
    labels.insert(labels.end(), range.labels.begin(), range.labels.end());
    dense.insert(dense.end(), range.dense.begin(), range.dense.end());
    ids.insert(ids.end(), range.ids.begin(), range.ids.end());
    for (int64_t line : range.lines) lines.push_back(line + offset);
    for (const tf_sdca::BadLine& bad : range.bad) {
      bad_lines.push_back(bad.line + offset);
    }
    offset += range.num_lines;
  }
  CHECK(offset == whole.num_lines);
  CHECK(labels == whole.labels && dense == whole.dense && ids == whole.ids);
  CHECK(lines == whole.lines);
  std::vector<int64_t> whole_bad;
  for (const tf_sdca::BadLine& bad : whole.bad) whole_bad.push_back(bad.line);
  CHECK(bad_lines == whole_bad);
}

}  // namespace

int main() {
  std::mt19937_64 rng(20261126);
  const tf_sdca::CriteoHasher hasher(&Fnv, 18);
  int64_t rows = 0, bad = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int num_lines = static_cast<int>(rng() % 60);
    for (int k = 0; k < num_lines; ++k) {
      std::string line = round % 2 ? CriteoLine(rng) : LibsvmLine(rng);
      for (int m = static_cast<int>(rng() % 4) - 1; m > 0; --m) {
        Mutate(&line, rng);
      }
      text += line;
      if (k + 1 < num_lines || rng() % 2) text += rng() % 5 ? "\n" : "\r\n";
    }
    // An exact-size copy: ASan sees a read past the block's end.
    std::unique_ptr<char[]> block(new char[text.size()]);
    std::memcpy(block.get(), text.data(), text.size());
    const int64_t size = static_cast<int64_t>(text.size());
    for (int parts = 1; parts <= 5; ++parts) {
      CheckBlock(block.get(), size, parts, hasher);
    }
    tf_sdca::CriteoRows criteo;
    tf_sdca::ParseCriteo(block.get(), block.get() + size, block.get(), hasher,
                         &criteo);
    tf_sdca::LibsvmRows svm;
    tf_sdca::ParseLibsvm(block.get(), block.get() + size, block.get(), &svm);
    rows += criteo.labels.size() + svm.labels.size();
    bad += criteo.bad.size() + svm.bad.size();
  }
  // Both kinds of line must have occurred, or the corpus tests nothing.
  CHECK(rows > 1000 && bad > 1000);
  std::printf("OK\n");
  return 0;
}
