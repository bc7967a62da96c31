// 128-bit fingerprints of example ids (keys of the per-example dual state).
//
// TensorFlow's pip package ships no farmhash header, so tf_sdca carries its
// own: two 64-bit hashes with independent seeds, each folding 8-byte words
// through the SplitMix64 finaliser (a bijection with full avalanche). Not
// cryptographic; collisions between n ids occur with probability ~n^2/2^129.
// The values are part of saved state: never change this function.
#ifndef TF_SDCA_KERNELS_CORE_FINGERPRINT_H_
#define TF_SDCA_KERNELS_CORE_FINGERPRINT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tf_sdca {

inline uint64_t FinalizeMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline uint64_t Hash64(const char* data, size_t size, uint64_t seed) {
  uint64_t h = FinalizeMix(seed ^ (size * 0x9E3779B97F4A7C15ULL));
  size_t k = 0;
  for (; k + 8 <= size; k += 8) {
    uint64_t word;
    std::memcpy(&word, data + k, 8);
    h = FinalizeMix(h ^ FinalizeMix(word + 0x632BE59BD9B4E019ULL));
  }
  uint64_t tail = 0;
  for (size_t j = 0; k + j < size; ++j) {
    tail |= static_cast<uint64_t>(static_cast<unsigned char>(data[k + j]))
            << (8 * j);
  }
  return FinalizeMix(h ^ FinalizeMix(tail ^ 0xD6E8FEB86659FD93ULL));
}

struct Fingerprint128 {
  uint64_t low;
  uint64_t high;
};

inline Fingerprint128 Fingerprint(const char* data, size_t size) {
  return {Hash64(data, size, 0x243F6A8885A308D3ULL),
          Hash64(data, size, 0x13198A2E03707344ULL)};
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_FINGERPRINT_H_
