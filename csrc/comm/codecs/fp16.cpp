// "fp16": IEEE half, round to nearest even. Finite values beyond the half range saturate to
// +-65504 (a gradient spike must not turn into inf on the wire); NaN stays NaN.
#include <algorithm>

#include "comm/codecs/internal.h"
#include "tensor/dtype.h"

namespace nexus::comm {
namespace {

constexpr float kHalfMax = 65504.0f;

class Fp16Codec final : public Codec {
 public:
  std::string spec() const override { return "fp16"; }
  size_t max_encoded_bytes(size_t n) const override { return n * sizeof(uint16_t); }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    for (size_t i = 0; i < n; ++i) {
      float v = x[i] != x[i] ? x[i] : std::clamp(x[i], -kHalfMax, kHalfMax);
      detail::store(out + 2 * i, float_to_fp16(v));
    }
    return 2 * n;
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n,
              bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    for (size_t i = 0; i < n; ++i)
      detail::put(fp16_to_float(detail::load<uint16_t>(in + 2 * i)), out, i, accumulate);
  }
};

}  // namespace

std::shared_ptr<const Codec> make_fp16_codec() { return std::make_shared<Fp16Codec>(); }

}  // namespace nexus::comm
