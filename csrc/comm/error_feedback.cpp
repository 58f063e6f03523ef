#include "comm/error_feedback.h"

#include "base/error.h"

namespace nexus::comm {

size_t Residual::encode(const Codec& codec, size_t offset, const float* x, size_t n, std::byte* out,
                        std::vector<float>& scratch) {
  NX_CHECK(offset + n <= values_.size(), "Residual of ", values_.size(), " elements cannot cover elements [", offset,
           ", ", offset + n, "): give each parameter buffer a Residual of its own size");
  float* r = values_.data() + offset;
  scratch.resize(2 * n);
  float* in = scratch.data();
  float* decoded = in + n;
  for (size_t i = 0; i < n; ++i) in[i] = x[i] + r[i];
  const size_t bytes = codec.encode(in, n, out);
  codec.decode(out, bytes, decoded, n, false);
  for (size_t i = 0; i < n; ++i) r[i] = in[i] - decoded[i];
  return bytes;
}

}  // namespace nexus::comm
