// matmul with numpy semantics: 1-D operands are promoted and the added dim removed afterwards;
// batch dims broadcast. Each (m, k) x (k, n) product is one BLAS GEMM (float/double), reading
// transposed views in place where their strides allow.
#include "base/thread_pool.h"
#include "device/backend.h"
#include "ops/blas.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/loops.h"
#include "ops/derivatives.h"
#include "ops/dispatch.h"
#include "ops/internal.h"

namespace nexus::ops {
namespace {

// A matrix operand that BLAS can read without a copy: row-major or column-major (transposed).
struct MatrixView {
  Tensor t;
  bool trans = false;
  int64_t ld = 0;
};

MatrixView as_blas_operand(const Tensor& t) {  // t: (..., r, c) with contiguous batch handled by caller
  int64_t nd = t.ndim(), r = t.shape()[nd - 2], c = t.shape()[nd - 1];
  int64_t sr = t.strides()[nd - 2], sc = t.strides()[nd - 1];
  if ((sc == 1 || c == 1) && sr >= std::max<int64_t>(c, 1)) return {t, false, sr};
  if ((sr == 1 || r == 1) && sc >= std::max<int64_t>(r, 1)) return {t, true, sc};
  Tensor cont = contiguous(t);
  return {cont, false, std::max<int64_t>(c, 1)};
}

template <class T> void gemm_batched(const Tensor& out, const Tensor& a, const Tensor& b) {
  // a: (batch..., m, k), b: (batch..., k, n), out: (batch..., m, n) contiguous; batch dims equal.
  int64_t nd = out.ndim(), m = out.shape()[nd - 2], n = out.shape()[nd - 1], k = a.shape()[nd - 1];
  Shape batch(out.shape().begin(), out.shape().end() - 2);
  int64_t nb = numel(batch);
  MatrixView va = as_blas_operand(a), vb = as_blas_operand(b);
  T* po = out.data<T>();
  auto offset_of = [&](const Tensor& t, int64_t i) {
    int64_t off = 0;
    for (int64_t d = int64_t(batch.size()) - 1; d >= 0; --d) {
      off += (i % batch[d]) * t.strides()[d];
      i /= batch[d];
    }
    return off;
  };
  auto one = [&](int64_t i) {
    const T* pa = va.t.template data<T>() + offset_of(va.t, i);
    const T* pb = vb.t.template data<T>() + offset_of(vb.t, i);
    if constexpr (std::is_floating_point_v<T>) {
      gemm<T>(va.trans, vb.trans, m, n, k, T(1), pa, va.ld, pb, vb.ld, T(0), po + i * m * n, n);
    } else {  // integer matmul: plain loops (rare; no BLAS for integers)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
          T acc = 0;
          for (int64_t j = 0; j < k; ++j) {
            T x = va.trans ? pa[j * va.ld + r] : pa[r * va.ld + j];
            T y = vb.trans ? pb[c * vb.ld + j] : pb[j * vb.ld + c];
            acc += x * y;
          }
          po[i * m * n + r * n + c] = acc;
        }
    }
  };
  if (m * n * k == 0) {
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = T(0);
    return;
  }
  // Products too small for gemm() to split over the pool (2mnk < 2^22 flops, ops/blas.cpp) run
  // side by side instead, one per task; larger ones run in turn, each split inside gemm().
  if (nb > 1 && m * n * k < (1 << 21)) {
    parallel_for(nb, 1, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < nb; ++i) one(i);  // big products: BLAS threads inside
  }
}

// relu(a @ b + bias) (bias and relu optional) by the packed kernel, for a float32 host product whose
// b (k, n) has constant storage: an inference model's weights, packed once (gemm_kernel.cpp).
// a is (..., k); returns an undefined tensor where the product is not of that kind.
Tensor constant_product(const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) {
  const int64_t k = b.dim(0), n = b.dim(1);
  const bool host_f32 = a.dtype() == DType::Float32 && b.dtype() == DType::Float32 && a.device().is_cpu() &&
                        b.device().is_cpu() &&
                        (!bias.defined() || (bias.dtype() == DType::Float32 && bias.device().is_cpu()));
  if (!host_f32 || !b.storage()->constant() || a.numel() == 0 || k == 0 || n == 0) return Tensor();
  Tensor rows = reshape(a, {-1, k});
  if (rows.strides()[1] != 1) rows = contiguous(rows);
  Tensor out = Tensor::empty({rows.dim(0), n}, DType::Float32);
  cpu::kernels().matmul_constant(out, rows, b, bias.defined() ? contiguous(reshape(bias, {n})) : Tensor(), relu);
  Shape shape = a.shape();
  shape.back() = n;
  return reshape(out, shape);
}

}  // namespace

// Batched matmul on operands with ndim >= 2 (the differentiable primitive).
static Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  // (batch..., m, k) @ (k, n), a linear layer over a batch of sequences: one gemm of
  // (batch*m, k) @ (k, n) instead of a gemm per batch entry, each packing the same matrix.
  if (a.ndim() > 2 && b.ndim() == 2 && a.shape().back() == b.shape()[0] && a.numel() > 0) {
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.shape()[1]);
    return reshape(matmul_nd(reshape(a, {-1, a.shape().back()}), b), out_shape);
  }
  int64_t ka = a.shape().back(), kb = b.shape()[b.ndim() - 2];
  NX_CHECK(ka == kb, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()), " are not aligned: ", ka,
           " (dim ", a.ndim() - 1, ") != ", kb, " (dim ", b.ndim() - 2, ")");
  NX_CHECK_TYPE(a.dtype() != DType::Bool && b.dtype() != DType::Bool, "matmul: not supported for bool tensors");
  const Device dev = common_device("matmul", {a, b});
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, "matmul");
  } catch (const ValueError&) {
    throw ValueError(str("matmul: batch dimensions of shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
                         " cannot be broadcast"));
  }
  DType dt = promote_types(a.dtype(), b.dtype());
  DType cdt = compute_dtype(dt);
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {a.shape()[a.ndim() - 2], ka});
  sb.insert(sb.end(), {kb, b.shape().back()});
  so.insert(so.end(), {a.shape()[a.ndim() - 2], b.shape().back()});
  // A device multiplies float16/bfloat16 at their width (tensor cores): no staging casts there.
  const DType kdt = !dev.is_cpu() && (dt == DType::Float16 || dt == DType::BFloat16) ? dt : cdt;
  Tensor ac = cpu::broadcast_view(cast(a.detach(), kdt), sa);
  Tensor bc = cpu::broadcast_view(cast(b.detach(), kdt), sb);
  // b an inference model's weights: their packed form is kept, no BLAS packing per call
  Tensor out = batch.empty() ? constant_product(ac, bc, Tensor(), false) : Tensor();
  if (!out.defined()) {
    out = Tensor::empty(so, kdt, dev);
    if (dev.is_cpu()) {
      dispatch_compute(cdt, "matmul", [&](auto t) { gemm_batched<decltype(t)>(out, ac, bc); });
    } else if (!is_floating(cdt)) {  // cuBLAS multiplies floats: integers go through the host
      out = to_device(matmul_nd(to_device(a.detach(), Device::cpu()), to_device(b.detach(), Device::cpu())), dev);
    } else {
      device::backend(dev).matmul(out, ac, bc);
    }
  }
  out = cast(out, dt);
  return autograd::record("matmul", out, {a, b}, grad::matmul(a, b));
}

Tensor matmul_epilogue(const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) {
  NX_CHECK(!autograd::would_record({a, b, bias}),
           "matmul with a fused bias/relu epilogue has no backward; it is made for inference graphs, where no input "
           "requires grad (use matmul, then the add and relu, to differentiate)");
  NX_CHECK(a.ndim() >= 2 && b.ndim() == 2 && a.shape().back() == b.dim(0),
           "matmul: an epilogue needs a (..., k) @ "
           "(k, n) product, got shapes ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  const int64_t n = b.dim(1);
  NX_CHECK(!bias.defined() || (bias.numel() == n && bias.shape().back() == n), "matmul: a bias of shape ",
           shape_str(bias.defined() ? bias.shape() : Shape{}), " must hold the product's ", n, " columns");
  if (Tensor out = constant_product(a, b, bias, relu); out.defined()) return out;
  Tensor out = matmul(a, b);  // the ops it stands for, one by one
  if (bias.defined()) out = add(out, bias);
  return relu ? unary(UnaryOp::Relu, out) : out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  NX_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "matmul: operands must have at least 1 dimension, got shapes ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  Tensor a2 = a.ndim() == 1 ? unsqueeze(a, 0) : a;
  Tensor b2 = b.ndim() == 1 ? unsqueeze(b, 1) : b;
  if (a2.shape().back() != b2.shape()[b2.ndim() - 2])  // name the user's shapes, not the promoted ones
    NX_CHECK(false, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
             " are not aligned: ", a2.shape().back(), " != ", b2.shape()[b2.ndim() - 2]);
  Tensor out = matmul_nd(a2, b2);
  if (a.ndim() > 1 && b.ndim() > 1) return out;
  Shape shape = out.shape();
  if (b.ndim() == 1) shape.pop_back();
  if (a.ndim() == 1) shape.erase(shape.end() - (b.ndim() == 1 ? 1 : 2));
  return reshape(out, shape);
}

}  // namespace nexus::ops
