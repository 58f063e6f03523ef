// "sign": scaled 1-bit (signSGD with a magnitude, as in 1-bit SGD / EF-SignSGD). One float32
// scale = mean|x| over the segment, then ceil(n / 8) bytes of sign bits (bit i set: x[i] < 0).
// Decodes to -scale / +scale; 0 decodes to +scale. Size: 4 + ceil(n / 8) bytes (0 for n = 0).
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
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += std::fabs(double(x[i]));
    detail::store(out, float(sum / double(n)));
    std::byte* bits = out + sizeof(float);
    std::fill(bits, bits + (n + 7) / 8, std::byte{0});
    for (size_t i = 0; i < n; ++i)
      if (std::signbit(x[i]) && x[i] != 0) bits[i / 8] |= std::byte(1u << (i % 8));
    return max_encoded_bytes(n);
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    if (n == 0) return;
    const float scale = detail::load<float>(in);
    const std::byte* bits = in + sizeof(float);
    for (size_t i = 0; i < n; ++i) {
      const bool neg = std::to_integer<unsigned>(bits[i / 8] >> (i % 8)) & 1u;
      detail::put(neg ? -scale : scale, out, i, accumulate);
    }
  }
};

}  // namespace

std::shared_ptr<const Codec> make_sign_codec() { return std::make_shared<SignCodec>(); }

}  // namespace nexus::comm::NX_CPU_VARIANT
