// "fp16": IEEE half, round to nearest even. Finite values beyond the half range saturate to
// +-65504 (a gradient spike must not turn into inf on the wire); NaN stays NaN. Converted as
// tensors are (tensor/half.h: the compiler's half type, one F16C instruction per element in the
// x86-64-v3 and -v4 variants).
#include <algorithm>

#include "comm/codecs/internal.h"
#include "tensor/dtype.h"

namespace nexus::comm::NX_CPU_VARIANT {
namespace {

constexpr float kHalfMax = 65504.0f;

uint16_t to_half(float v) { return float_to_fp16(v); }
float from_half(uint16_t bits) { return fp16_to_float(bits); }

class Fp16Codec final : public Codec {
 public:
  std::string spec() const override { return "fp16"; }
  size_t max_encoded_bytes(size_t n) const override { return n * sizeof(uint16_t); }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    for (size_t i = 0; i < n; ++i) {
      // min(max(x, -M), M) with x first keeps a NaN (std::max/min return their first argument
      // when the comparison is false), branch-free
      detail::store(out + 2 * i, to_half(std::min(std::max(x[i], -kHalfMax), kHalfMax)));
    }
    return 2 * n;
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    if (accumulate) {
      for (size_t i = 0; i < n; ++i) out[i] += from_half(detail::load<uint16_t>(in + 2 * i));
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = from_half(detail::load<uint16_t>(in + 2 * i));
    }
  }
};

}  // namespace

std::shared_ptr<const Codec> make_fp16_codec() { return std::make_shared<Fp16Codec>(); }

}  // namespace nexus::comm::NX_CPU_VARIANT
