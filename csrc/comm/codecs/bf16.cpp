// "bf16": bfloat16 (float32's exponent, 8 bits of mantissa), round to nearest even.
#include "comm/codecs/internal.h"
#include "tensor/dtype.h"

namespace nexus::comm::NX_CPU_VARIANT {
namespace {

class Bf16Codec final : public Codec {
 public:
  std::string spec() const override { return "bf16"; }
  size_t max_encoded_bytes(size_t n) const override { return n * sizeof(uint16_t); }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    for (size_t i = 0; i < n; ++i) detail::store(out + 2 * i, float_to_bf16(x[i]));
    return 2 * n;
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    for (size_t i = 0; i < n; ++i) detail::put(bf16_to_float(detail::load<uint16_t>(in + 2 * i)), out, i, accumulate);
  }
};

}  // namespace

std::shared_ptr<const Codec> make_bf16_codec() { return std::make_shared<Bf16Codec>(); }

}  // namespace nexus::comm::NX_CPU_VARIANT
