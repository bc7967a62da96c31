// The example-state table (kernels/kernels/example_state_table.h) without
// TensorFlow: checked against std::unordered_map through growth, stale
// slots, overwrites and clearing, then timed on batches of a streamed epoch.
//
//   example_state_table_main check
//   example_state_table_main time [examples=500000] [batch=50000] [width=4]
//
// `check` exits 1 on the first disagreement. `time` prints ns per key of
// FindAll and WriteAll (with FindAll's slots) on random batches of stored
// keys, after filling the table as a first epoch does, and the same for
// that first epoch (every key new, the table growing).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/kernels/example_state_table.h"

namespace {

using tf_sdca::ExampleStateTable;

int Fail(const std::string& what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  return 1;
}

// A key ExampleKeys could give (never the two reserved lowest values).
int64_t RandomKey(std::mt19937_64& rng) {
  int64_t key = static_cast<int64_t>(rng());
  return key <= tf_sdca::kEmptyKey + 1 ? key + 2 : key;
}

int Check() {
  std::mt19937_64 rng(7);
  for (const int64_t width : {1, 4, 13}) {
    ExampleStateTable table(width);
    std::unordered_map<int64_t, std::vector<float>> truth;
    std::vector<int64_t> known;
    for (int round = 0; round < 40; ++round) {
      // Batches mixing stored keys, new keys and (rarely) keys that are
      // multiples of a shard count, whose low bits agree.
      const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
      std::vector<int64_t> keys(n);
      std::unordered_map<int64_t, int> seen;
      for (int64_t i = 0; i < n; ++i) {
        int64_t key;
        do {
          const uint64_t pick = rng() % 4;
          key = pick == 0 && !known.empty()   ? known[rng() % known.size()]
                : pick == 1                   ? RandomKey(rng) / 64 * 64
                                              : RandomKey(rng);
        } while (seen.count(key) > 0);
        seen[key] = 1;
        keys[i] = key;
      }
      std::vector<float> values(n * width);
      std::vector<int64_t> slots(n);
      table.FindAll(keys.data(), n, values.data(), slots.data());
      for (int64_t i = 0; i < n; ++i) {
        auto it = truth.find(keys[i]);
        for (int64_t k = 0; k < width; ++k) {
          const float want = it == truth.end() ? 0.0f : it->second[k];
          if (values[i * width + k] != want) {
            return Fail("FindAll value of key " + std::to_string(keys[i]));
          }
        }
        if ((slots[i] >= 0) != (it != truth.end())) {
          return Fail("FindAll slot of key " + std::to_string(keys[i]));
        }
      }
      for (float& v : values) v = static_cast<float>(rng() % 1000) / 7.0f;
      // Every third round writes without slots; every fifth grows the table
      // first (another batch's new keys), so that the slots are stale.
      if (round % 5 == 4) {
        std::vector<int64_t> more(4096);
        std::vector<float> rows(4096 * width, 1.0f);
        for (int64_t& key : more) {
          do key = RandomKey(rng); while (seen.count(key) > 0);
          seen[key] = 1;
          truth[key] = std::vector<float>(width, 1.0f);
          known.push_back(key);
        }
        table.WriteAll(more.data(), nullptr, 4096, rows.data());
      }
      table.WriteAll(keys.data(), round % 3 == 2 ? nullptr : slots.data(), n,
                     values.data());
      for (int64_t i = 0; i < n; ++i) {
        if (truth.count(keys[i]) == 0) known.push_back(keys[i]);
        truth[keys[i]].assign(values.begin() + i * width,
                              values.begin() + (i + 1) * width);
      }
      if (table.size() != static_cast<int64_t>(truth.size())) {
        return Fail("size " + std::to_string(table.size()) + " != " +
                    std::to_string(truth.size()));
      }
    }
    int64_t visited = 0;
    bool same = true;
    table.ForEach([&](int64_t key, const char* row) {
      ++visited;
      auto it = truth.find(key);
      same = same && it != truth.end() &&
             std::memcmp(row, it->second.data(), 4 * width) == 0;
    });
    if (!same || visited != table.size()) return Fail("ForEach");
    table.Clear();
    if (table.size() != 0) return Fail("Clear");
    std::vector<float> row(width);
    int64_t slot;
    table.FindAll(&known[0], 1, row.data(), &slot);
    if (slot != -1 || row[0] != 0.0f) return Fail("FindAll after Clear");
    std::printf("width %lld: %zu keys agree\n", static_cast<long long>(width),
                truth.size());
  }
  std::printf("OK\n");
  return 0;
}

int Time(int64_t examples, int64_t batch, int64_t width) {
  std::mt19937_64 rng(1);
  std::vector<int64_t> keys(examples);
  for (int64_t& key : keys) key = RandomKey(rng);
  ExampleStateTable table(width);
  std::vector<float> values(batch * width, 0.5f);
  std::vector<int64_t> slots(batch);
  using Clock = std::chrono::steady_clock;
  // A first epoch: each batch's keys are new, and the table grows.
  double first_find_s = 0, first_write_s = 0;
  int64_t first_keys = 0;
  for (int64_t start = 0; start + batch <= examples; start += batch) {
    const auto t0 = Clock::now();
    table.FindAll(&keys[start], batch, values.data(), slots.data());
    const auto t1 = Clock::now();
    table.WriteAll(&keys[start], slots.data(), batch, values.data());
    const auto t2 = Clock::now();
    first_find_s += std::chrono::duration<double>(t1 - t0).count();
    first_write_s += std::chrono::duration<double>(t2 - t1).count();
    first_keys += batch;
  }
  double find_s = 0, write_s = 0;
  const int rounds = 20;
  std::vector<int64_t> picked(batch);
  for (int r = 0; r < rounds; ++r) {
    for (int64_t& key : picked) key = keys[rng() % examples];
    const auto t0 = Clock::now();
    table.FindAll(picked.data(), batch, values.data(), slots.data());
    const auto t1 = Clock::now();
    table.WriteAll(picked.data(), slots.data(), batch, values.data());
    const auto t2 = Clock::now();
    find_s += std::chrono::duration<double>(t1 - t0).count();
    write_s += std::chrono::duration<double>(t2 - t1).count();
  }
  const double keys_timed = static_cast<double>(rounds) * batch;
  std::printf("%lld examples, width %lld, %.1f MB: FindAll %.1f ns/key, "
              "WriteAll %.1f ns/key (batches of %lld)\n",
              static_cast<long long>(table.size()),
              static_cast<long long>(width), table.bytes() / 1e6,
              1e9 * find_s / keys_timed, 1e9 * write_s / keys_timed,
              static_cast<long long>(batch));
  std::printf("first epoch (new keys, growth included): FindAll %.1f ns/key, "
              "WriteAll %.1f ns/key\n",
              1e9 * first_find_s / first_keys, 1e9 * first_write_s / first_keys);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "check") return Check();
  if (mode == "time") {
    return Time(argc > 2 ? std::atoll(argv[2]) : 500000,
                argc > 3 ? std::atoll(argv[3]) : 50000,
                argc > 4 ? std::atoll(argv[4]) : 4);
  }
  std::fprintf(stderr, "usage: %s check | time [examples] [batch] [width]\n",
               argv[0]);
  return 2;
}
