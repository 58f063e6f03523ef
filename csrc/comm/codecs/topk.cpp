// "topk:RATIO": the k = ceil(RATIO * n) elements of largest |x| (ties: the lower index wins, so
// encoding is deterministic), sent as k uint32 indices (ascending) then their k float32 values.
// Everything else decodes as 0 (with error feedback it waits in the Residual for a later round).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "comm/codecs/internal.h"

namespace nexus::comm::NX_CPU_VARIANT {
namespace {

class TopKCodec final : public Codec {
 public:
  explicit TopKCodec(double ratio) : ratio_(ratio) {}
  std::string spec() const override { return str("topk:", ratio_); }
  double topk_ratio() const override { return ratio_; }
  size_t k(size_t n) const {
    // The small epsilon keeps ratio * n that is an integer up to rounding (0.1 * 30) from
    // rounding up to one more entry.
    return n == 0 ? 0 : std::min(n, size_t(std::ceil(ratio_ * double(n) - 1e-9)));
  }
  size_t max_encoded_bytes(size_t n) const override { return k(n) * (sizeof(uint32_t) + sizeof(float)); }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    NX_CHECK(n <= UINT32_MAX, "codec \"", spec(), "\": a segment of ", n,
             " elements is too long for 32-bit indices; use a smaller segment size");
    const size_t kk = k(n);
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    auto larger = [x](uint32_t a, uint32_t b) {
      float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
      return fa > fb || (fa == fb && a < b);
    };
    std::nth_element(idx.begin(), idx.begin() + kk, idx.end(), larger);
    std::sort(idx.begin(), idx.begin() + kk);
    for (size_t i = 0; i < kk; ++i) {
      detail::store(out + sizeof(uint32_t) * i, idx[i]);
      detail::store(out + sizeof(uint32_t) * kk + sizeof(float) * i, x[idx[i]]);
    }
    return max_encoded_bytes(n);
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    if (!accumulate) std::fill(out, out + n, 0.0f);
    const size_t kk = k(n);
    for (size_t i = 0; i < kk; ++i) {
      const uint32_t j = detail::load<uint32_t>(in + sizeof(uint32_t) * i);
      NX_CHECK(j < n, "codec \"", spec(), "\": index ", j, " out of range for ", n, " elements (corrupt message)");
      out[j] += detail::load<float>(in + sizeof(uint32_t) * kk + sizeof(float) * i);
    }
  }

 private:
  double ratio_;
};

}  // namespace

std::shared_ptr<const Codec> make_topk_codec(double ratio) { return std::make_shared<TopKCodec>(ratio); }

}  // namespace nexus::comm::NX_CPU_VARIANT
