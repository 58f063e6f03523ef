// Shared helpers for the codec files, and their table (not a public header).
#pragma once

#include <cstdint>
#include <cstring>

#include "base/cpu_variant.h"
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

// The codecs' factories, one table per CPU variant (base/cpu_variant.h): the files in codecs/
// are compiled once per variant (their 16-lane blocks become AVX-512, AVX2 or SSE code). codec.cpp's
// make_*_codec() take the active variant's.
struct CodecFactories {
  std::shared_ptr<const Codec> (*none)();
  std::shared_ptr<const Codec> (*fp16)();
  std::shared_ptr<const Codec> (*bf16)();
  std::shared_ptr<const Codec> (*int8_block)();
  std::shared_ptr<const Codec> (*topk)(double ratio);
  std::shared_ptr<const Codec> (*sign)();
};

NX_CPU_VARIANT_TABLES(CodecFactories, factories_for);

}  // namespace nexus::comm::detail

#ifdef NX_CPU_VARIANT
#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace nexus::comm::NX_CPU_VARIANT {

// Sixteen lanes as one GCC vector: the compiler lowers each operation to the variant's widest
// registers (one zmm under AVX-512, two ymm under AVX2, four xmm or NEON q registers), so the
// codecs' fixed-width blocks vectorise in every variant without intrinsics.
// (Passing them by value in variants narrower than AVX-512 has another ABI than under AVX-512:
// GCC's -Wpsabi note. These helpers are inline in one variant's namespace, never called across.)
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float F32x16 __attribute__((vector_size(64)));
typedef uint32_t U32x16 __attribute__((vector_size(64)));
typedef uint32_t U32x8 __attribute__((vector_size(32)));

template <class V> V load16(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V> void store16(void* p, const V& v) { std::memcpy(p, &v, sizeof v); }

// The top bits of 16 lanes as a 16-bit mask (bit j: lane j). Gathering bits across lanes is the
// one step GCC's vectors do not express, so x86 takes its movemask from the compiler's
// intrinsics, per CPU variant; other targets loop.
inline uint32_t top_bits16(const U32x16& lanes) {
#if defined(__AVX512F__)
  return uint32_t(_mm512_cmplt_epi32_mask(__m512i(lanes), _mm512_setzero_si512()));
#elif defined(__AVX2__)
  const auto half = [](__m256i v) { return uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(v))); };
  __m256i h[2];
  std::memcpy(h, &lanes, sizeof h);
  return half(h[0]) | half(h[1]) << 8;
#elif defined(__SSE2__)
  __m128i q[4];
  std::memcpy(q, &lanes, sizeof q);
  uint32_t bits = 0;
  for (int i = 0; i < 4; ++i) bits |= uint32_t(_mm_movemask_ps(_mm_castsi128_ps(q[i]))) << 4 * i;
  return bits;
#else
  uint32_t bits = 0;
  for (int j = 0; j < 16; ++j) bits |= (lanes[j] >> 31) << j;
  return bits;
#endif
}

// One per file in codecs/.
std::shared_ptr<const Codec> make_none_codec();
std::shared_ptr<const Codec> make_fp16_codec();
std::shared_ptr<const Codec> make_bf16_codec();
std::shared_ptr<const Codec> make_int8_block_codec();
std::shared_ptr<const Codec> make_topk_codec(double ratio);
std::shared_ptr<const Codec> make_sign_codec();
}  // namespace nexus::comm::NX_CPU_VARIANT
#endif
