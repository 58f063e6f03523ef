// Shared helpers for the codec files (not a public header).
#pragma once

#include <cstring>

#include "base/error.h"
#include "comm/codec.h"

namespace nexus::comm::detail {

inline void check_bytes(const Codec& c, size_t bytes, size_t n) {
  NX_CHECK(bytes == c.max_encoded_bytes(n), "codec \"", c.spec(), "\": ", bytes, " bytes cannot hold ", n,
           " encoded elements (expected ", c.max_encoded_bytes(n),
           "); the sender used a different codec or segment size");
}

inline void put(float out_value, float* out, size_t i, bool accumulate) {
  out[i] = accumulate ? out[i] + out_value : out_value;
}

template <class T> T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T> void store(std::byte* p, T v) { std::memcpy(p, &v, sizeof(T)); }

}  // namespace nexus::comm::detail
