// CudaBackend::matmul: row-major out = a @ b as cuBLAS's column-major out^T = b^T a^T. Each
// operand's last two dims are used in place when rows or columns are contiguous (a transposed view
// becomes cuBLAS's op T); anything else is first copied to contiguous with the cast kernel. Batch
// dims (broadcast ones have stride 0) become one strided-batched GEMM when each operand's batches
// are evenly spaced, else one GEMM per batch.
#include <optional>

#include "backend.h"
#include "cublas.h"
#include "device_guard.h"

namespace nexus::cuda {
namespace {

// X^T of a row-major r x c matrix with strides (rs, cs) as a column-major GEMM operand: op N when
// rows are contiguous (ld = rs), op T when columns are (ld = cs); nullopt when neither.
std::optional<GemmOperand> as_operand(const void* ptr, int64_t r, int64_t c, int64_t rs, int64_t cs) {
  // A dimension of size 1 has no stride that matters: pick the one that makes the layout valid.
  if (r == 1) rs = cs == 1 ? std::max<int64_t>(c, 1) : 1;
  if (c == 1) cs = rs == 1 ? std::max<int64_t>(r, 1) : 1;
  if (cs == 1 && rs >= std::max<int64_t>(c, 1)) return GemmOperand{ptr, false, rs, 0};
  if (rs == 1 && cs >= std::max<int64_t>(r, 1)) return GemmOperand{ptr, true, cs, 0};
  return std::nullopt;
}

// The element distance between consecutive batches of x (batch dims: all but the last two,
// flattened row-major), if it is the same for all of them.
std::optional<int64_t> uniform_batch_stride(const Tensor& x) {
  const int64_t nb = x.ndim() - 2;
  std::optional<int64_t> step;
  int64_t inner = 1;  // batches per step of dim d
  for (int64_t d = nb - 1; d >= 0; --d) {
    const int64_t size = x.shape()[size_t(d)], s = x.strides()[size_t(d)];
    if (size != 1) {
      if (!step) step = s / std::max<int64_t>(inner, 1);
      if (s != *step * inner) return std::nullopt;
    }
    inner *= size;
  }
  return step.value_or(0);
}

// Element offset of batch b of x (b over the flattened batch dims).
int64_t batch_offset(const Tensor& x, int64_t b) {
  int64_t off = 0;
  for (int64_t d = x.ndim() - 3; d >= 0; --d) {
    const int64_t size = x.shape()[size_t(d)];
    off += (b % size) * x.strides()[size_t(d)];
    b /= size;
  }
  return off;
}

// x itself when cuBLAS can read its last two dims, else a contiguous copy.
Tensor gemm_ready(CudaBackend& be, const Tensor& x) {
  const int64_t nd = x.ndim();
  if (as_operand(nullptr, x.dim(nd - 2), x.dim(nd - 1), x.strides()[size_t(nd - 2)], x.strides()[size_t(nd - 1)]))
    return x;
  Tensor copy = Tensor::empty(x.shape(), x.dtype(), x.device());
  be.cast(copy, x);
  return copy;
}

}  // namespace

void CudaBackend::matmul(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  NX_CHECK_TYPE(is_floating(out.dtype()), "matmul on CUDA: expected a floating dtype, got ", dtype_name(out.dtype()));
  const int64_t nd = out.ndim();
  NX_ASSERT(nd >= 2 && a_in.ndim() == nd && b_in.ndim() == nd, "CUDA matmul operands of ndim ", a_in.ndim(), ", ",
            b_in.ndim(), " for out ", nd);
  const int64_t m = out.dim(nd - 2), n = out.dim(nd - 1), k = a_in.dim(nd - 1);
  if (out.numel() == 0) return;
  if (k == 0) return fill(out, 0.0);
  DeviceGuard guard(out.device().index);
  const Tensor a = gemm_ready(*this, a_in), b = gemm_ready(*this, b_in);
  // cuBLAS's A is our b (n x k as b^T), its B our a (k x m as a^T), its C our out^T (ld n).
  GemmOperand ga = *as_operand(b.raw_data(), k, n, b.strides()[size_t(nd - 2)], b.strides()[size_t(nd - 1)]);
  GemmOperand gb = *as_operand(a.raw_data(), m, k, a.strides()[size_t(nd - 2)], a.strides()[size_t(nd - 1)]);
  const int64_t batch = out.numel() / (m * n);
  const auto sa = uniform_batch_stride(b), sb = uniform_batch_stride(a);
  if (sa && sb) {
    ga.batch_stride = *sa;
    gb.batch_stride = *sb;
    gemm_strided_batched(out.dtype(), n, m, k, ga, gb, out.raw_data(), n, m * n, batch, current_stream());
    return;
  }
  const int64_t isz = itemsize(out.dtype());
  const char* pa = static_cast<const char*>(ga.ptr);
  const char* pb = static_cast<const char*>(gb.ptr);
  for (int64_t i = 0; i < batch; ++i) {
    GemmOperand ai = ga, bi = gb;
    ai.ptr = pa + batch_offset(b, i) * isz;
    bi.ptr = pb + batch_offset(a, i) * isz;
    gemm_strided_batched(out.dtype(), n, m, k, ai, bi, static_cast<char*>(out.raw_data()) + i * m * n * isz, n, m * n,
                         1, current_stream());
  }
}

}  // namespace nexus::cuda
