// Error feedback (EF-SGD, 1-bit SGD): a Residual per parameter buffer keeps what a lossy codec
// dropped, and adds it back before the next encoding of the same elements:
//   in = x + r;  wire = encode(in);  r = in - decode(wire)
// so over repeated rounds nothing is lost, only delayed. The ring encodes every element exactly
// once per all-reduce on each rank (reduce-scatter sends every chunk but the one this rank owns;
// the all-gather sends the owned one), so one Residual the size of the buffer serves one rank.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/codec.h"

namespace nexus::comm {

class Residual {
 public:
  explicit Residual(size_t n = 0) : values_(n, 0.0f) {}
  size_t size() const { return values_.size(); }
  const float* data() const { return values_.data(); }
  void reset() { std::fill(values_.begin(), values_.end(), 0.0f); }

  // Encodes x[0..n) (which sits at `offset` in the parameter buffer) with the residual added and
  // stores the new residual; `scratch` is reused across calls. Returns the bytes written to out.
  size_t encode(const Codec& codec, size_t offset, const float* x, size_t n, std::byte* out,
                std::vector<float>& scratch);

 private:
  std::vector<float> values_;
};

}  // namespace nexus::comm
