// "fp16": IEEE half, round to nearest even. Finite values beyond the half range saturate to
// +-65504 (a gradient spike must not turn into inf on the wire); NaN stays NaN (quiet, its top
// payload bits kept, as F16C's conversion does).
//
// Where the variant has F16C (x86-64-v3 and -v4) eight elements convert in one instruction, from
// the compiler's intrinsics: GCC does not vectorise the scalar _Float16 conversion. Elsewhere
// (and for the tails) the conversion is integer and float arithmetic on the bits, branch-free so
// the compiler can vectorise it, and bit-identical to F16C's (tests/cpp/test_codecs.cpp checks
// the rounding edges in every variant; the formulas were checked against F16C on all 2^32 floats).
#include <algorithm>
#include <bit>

#include "comm/codecs/internal.h"

namespace nexus::comm::NX_CPU_VARIANT {
namespace {

constexpr float kHalfMax = 65504.0f;

// |x| (clamped to the half range first) as half bits, round to nearest even.
inline uint16_t to_half(float x) {
  // min(max(x, -M), M) with x first keeps a NaN (std::max/min return their first argument
  // when the comparison is false)
  const uint32_t u = std::bit_cast<uint32_t>(std::min(std::max(x, -kHalfMax), kHalfMax));
  const uint32_t sign = u & 0x80000000u, a = u ^ sign;
  // normal halves: rebias the exponent (127 -> 15) and round away 13 mantissa bits, ties to even
  const uint32_t normal = (a - (uint32_t(127 - 15) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // below 2^-14 (half subnormals): adding 0.5 rounds |x| to a multiple of 2^-24 in the float
  // adder itself; the low mantissa bits are then the half's
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  const uint32_t h = a > 0x7f800000u ? nan : a < 0x38800000u ? subnormal : normal;
  return uint16_t(h | (sign >> 16));
}

inline float from_half(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = h & 0x7c00u, m = uint32_t(h & 0x7fffu) << 13;
  const uint32_t normal = m + (uint32_t(127 - 15) << 23);
  const uint32_t inf_nan = (m + (uint32_t(255 - 31) << 23)) | ((h & 0x3ffu) ? 0x00400000u : 0u);  // NaN: quiet
  // subnormal halves: m * 2^-24 as (2^-14 + m * 2^-24) - 2^-14, both exact
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(m + 0x38800000u) - std::bit_cast<float>(0x38800000u));
  return std::bit_cast<float>((e == 0x7c00u ? inf_nan : e == 0 ? subnormal : normal) | sign);
}

class Fp16Codec final : public Codec {
 public:
  std::string spec() const override { return "fp16"; }
  size_t max_encoded_bytes(size_t n) const override { return n * sizeof(uint16_t); }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    size_t i = 0;
#if defined(__F16C__)
    // max(-M, x) and min(M, .) with x second return x when it is NaN, as the scalar clamp does
    const __m256 lo = _mm256_set1_ps(-kHalfMax), hi = _mm256_set1_ps(kHalfMax);
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_loadu_ps(x + i)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
#endif
    for (; i < n; ++i) detail::store(out + 2 * i, to_half(x[i]));
    return 2 * n;
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    size_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
      if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
      _mm256_storeu_ps(out + i, v);
    }
#endif
    if (accumulate) {
      for (; i < n; ++i) out[i] += from_half(detail::load<uint16_t>(in + 2 * i));
    } else {
      for (; i < n; ++i) out[i] = from_half(detail::load<uint16_t>(in + 2 * i));
    }
  }
};

}  // namespace

std::shared_ptr<const Codec> make_fp16_codec() { return std::make_shared<Fp16Codec>(); }

}  // namespace nexus::comm::NX_CPU_VARIANT
