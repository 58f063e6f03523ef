// ring_allreduce on a buffer of any floating dtype (see ring.h).
#include <vector>

#include "base/error.h"
#include "comm/ring.h"

namespace nexus::comm {

AllReduceStats ring_allreduce(Transport& t, void* data, DType dtype, size_t n, const AllReduceOptions& opts) {
  if (dtype == DType::Float32) return ring_allreduce(t, static_cast<float*>(data), n, opts);
  if (dtype == DType::Float64) return ring_allreduce(t, static_cast<double*>(data), n, opts);
  NX_CHECK_TYPE(is_half(dtype), "all_reduce: cannot reduce a ", dtype_name(dtype),
                " buffer; valid dtypes: float32, float64, float16, bfloat16");
  const bool f16 = dtype == DType::Float16;
  uint16_t* h = static_cast<uint16_t*>(data);
  std::vector<float> wide(n);
  for (size_t i = 0; i < n; ++i) wide[i] = f16 ? fp16_to_float(h[i]) : bf16_to_float(h[i]);
  AllReduceOptions o = opts;
  // Sums travel in the buffer's own 16-bit format; max/min keep exact values and take "none".
  if ((!o.codec || o.codec->lossless()) && !is_extremum(o.op)) {
    o.codec = f16 ? make_fp16_codec() : make_bf16_codec();
    o.residual = nullptr;  // the 16-bit wire is the buffer's own format: nothing to feed back
  }
  AllReduceStats stats = ring_allreduce(t, wide.data(), n, o);
  stats.bytes_uncompressed /= 2;  // counted as float32 by the ring; the buffer holds 2 bytes each
  for (size_t i = 0; i < n; ++i) h[i] = f16 ? float_to_fp16(wide[i]) : float_to_bf16(wide[i]);
  return stats;
}

}  // namespace nexus::comm
