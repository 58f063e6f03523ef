// "sign": scaled 1-bit (signSGD with a magnitude, as in 1-bit SGD / EF-SignSGD). One float32
// scale = mean|x| over the segment, then ceil(n / 8) bytes of sign bits (bit i set: x[i] < 0).
// Decodes to -scale / +scale; 0 decodes to +scale. Size: 4 + ceil(n / 8) bytes (0 for n = 0).
#include <algorithm>
#include <bit>
#include <cmath>

#include "comm/codecs/internal.h"

namespace nexus::comm::NX_CPU_VARIANT {
namespace {

class SignCodec final : public Codec {
 public:
  std::string spec() const override { return "sign"; }
  size_t max_encoded_bytes(size_t n) const override { return n == 0 ? 0 : sizeof(float) + (n + 7) / 8; }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    if (n == 0) return 0;
    std::byte* bits = out + sizeof(float);
    // One pass in blocks of 16: mean|x| in double, in 16 independent running sums (vectorised
    // without reassociating any one sum), added at the end; and two bytes of signs.
    // (8 lanes per conversion: GCC 12 splits a 16-lane float-to-double conversion into scalars)
    typedef float F8 __attribute__((vector_size(32)));
    typedef double D8 __attribute__((vector_size(64)));
    D8 lanes[2] = {};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      for (int h = 0; h < 2; ++h)
        lanes[h] += __builtin_convertvector(F8(load16<U32x8>(x + i + 8 * h) & 0x7fffffffu), D8);
      const U32x16 u = load16<U32x16>(x + i);
      // the sign bit, cleared for -0: 0x80000000 & 0x7fffffff
      detail::store(bits + i / 8, uint16_t(top_bits16(u & (u - 1))));
    }
    double sum = 0;
    for (size_t j = i; j < n; ++j) sum += std::fabs(double(x[j]));
    for (int j = 0; j < 16; ++j) sum += lanes[j / 8][j % 8];
    detail::store(out, float(sum / double(n)));
    std::fill(bits + i / 8, bits + (n + 7) / 8, std::byte{0});
    for (size_t j = i; j < n; ++j) {
      const uint32_t u = std::bit_cast<uint32_t>(x[j]);
      bits[j / 8] |= std::byte(((u & (u - 1)) >> 31) << (j % 8));
    }
    return max_encoded_bytes(n);
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    if (n == 0) return;
    const uint32_t scale = std::bit_cast<uint32_t>(detail::load<float>(in));
    const std::byte* bits = in + sizeof(float);
    // bit j of the 16-bit word at element i is element i + j's sign, moved to bit 31 of +scale
    const U32x16 lane_bit = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const U32x16 word = U32x16{} + uint32_t(detail::load<uint16_t>(bits + i / 8));
      const F32x16 v = F32x16(scale ^ (U32x16((word & lane_bit) != 0) & 0x80000000u));
      store16(out + i, accumulate ? load16<F32x16>(out + i) + v : v);
    }
    for (; i < n; ++i) {
      const float v = std::bit_cast<float>(scale ^ uint32_t(std::to_integer<uint8_t>(bits[i / 8]) >> (i % 8)) << 31);
      out[i] = accumulate ? out[i] + v : v;
    }
  }
};

}  // namespace

std::shared_ptr<const Codec> make_sign_codec() { return std::make_shared<SignCodec>(); }

}  // namespace nexus::comm::NX_CPU_VARIANT
