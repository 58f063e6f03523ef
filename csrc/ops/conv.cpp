// conv2d and 2-D pooling front ends (NCHW): validate, stage as contiguous float/double, call the
// kernels in ops/cpu/conv_kernel.cpp, record the backward rule.
#include "base/checked.h"
#include "ops/derivatives.h"
#include "ops/dispatch.h"
#include "ops/internal.h"

namespace nexus::ops {

// "2" when both values agree, "2x3" otherwise: how sizes appear in error messages.
static std::string pair_str(int64_t a, int64_t b) { return a == b ? str(a) : str(a, "x", b); }

// h + 2 * pad, the padded extent; ValueError when it passes int64 (a huge padding).
static int64_t padded(int64_t h, int64_t pad, const char* op) {
  int64_t twice = 0, out = 0;
  NX_CHECK(checked_mul(pad, 2, &twice) && checked_add(h, twice, &out), op, ": padding ", pad,
           " is too large (the padded input passes 2^63)");
  return out;
}

void check_conv2d(const Conv2dGeometry& g, const char* op) {
  NX_CHECK(g.n >= 0, op, ": batch size must be non-negative, got ", g.n);
  NX_CHECK(g.groups > 0, op, ": groups must be positive, got ", g.groups);
  NX_CHECK(g.c > 0 && g.h > 0 && g.w > 0 && g.k > 0 && g.kh > 0 && g.kw > 0, op,
           ": sizes must be positive, got input (", g.n, ", ", g.c, ", ", g.h, ", ", g.w, ") and weight (", g.k, ", ",
           g.c_per_group(), ", ", g.kh, ", ", g.kw, ")");
  NX_CHECK(g.c % g.groups == 0 && g.k % g.groups == 0, op, ": groups=", g.groups, " must divide both the ", g.c,
           " input channels and the ", g.k, " output channels");
  NX_CHECK(g.stride_h > 0 && g.stride_w > 0, op, ": stride must be positive, got ", pair_str(g.stride_h, g.stride_w));
  NX_CHECK(g.pad_h >= 0 && g.pad_w >= 0, op, ": padding must be non-negative, got ", pair_str(g.pad_h, g.pad_w));
  const int64_t ph = padded(g.h, g.pad_h, op), pw = padded(g.w, g.pad_w, op);
  NX_CHECK(g.kh <= ph && g.kw <= pw, op, ": kernel ", g.kh, "x", g.kw, " is larger than the padded input ", ph, "x", pw,
           " (padding ", pair_str(g.pad_h, g.pad_w), "); valid: kernel <= input + 2*padding");
}

void check_pool2d(const Pool2dGeometry& g, const char* op) {
  NX_CHECK(g.n >= 0, op, ": batch size must be non-negative, got ", g.n);
  NX_CHECK(g.c > 0 && g.h > 0 && g.w > 0, op, ": sizes must be positive, got input (", g.n, ", ", g.c, ", ", g.h, ", ",
           g.w, ")");
  NX_CHECK(g.kh > 0 && g.kw > 0, op, ": kernel size must be positive, got ", g.kh, "x", g.kw);
  NX_CHECK(g.stride_h > 0 && g.stride_w > 0, op, ": stride must be positive, got ", pair_str(g.stride_h, g.stride_w));
  NX_CHECK(g.pad >= 0, op, ": padding must be non-negative, got ", g.pad);
  NX_CHECK(g.pad <= g.kh / 2 && g.pad <= g.kw / 2, op, ": padding ", g.pad, " is more than half the kernel ", g.kh, "x",
           g.kw, "; valid: padding <= kernel / 2 = ", std::min(g.kh, g.kw) / 2);
  const int64_t ph = padded(g.h, g.pad, op), pw = padded(g.w, g.pad, op);
  NX_CHECK(g.kh <= ph && g.kw <= pw, op, ": kernel ", g.kh, "x", g.kw, " is larger than the padded input ", ph, "x", pw,
           " (padding ", g.pad, "); valid: kernel <= input + 2*padding");
}

static void check_nchw(const Tensor& x, const char* op) {
  NX_CHECK(x.ndim() == 4, op, ": input must be 4-D (N, C, H, W), got shape ", shape_str(x.shape()));
  NX_CHECK_TYPE(is_floating(x.dtype()), op, ": expected a floating-point input, got ", dtype_name(x.dtype()));
}

Conv2dGeometry conv2d_geometry(const Shape& x, const Shape& w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                               int64_t pad_w, int64_t groups) {
  NX_CHECK(x.size() == 4, "conv2d: input must be 4-D (N, C, H, W), got shape ", shape_str(x));
  NX_CHECK(w.size() == 4, "conv2d: weight must be 4-D (K, C / groups, KH, KW), got shape ", shape_str(w));
  Conv2dGeometry g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], stride_h, stride_w, pad_h, pad_w, groups};
  check_conv2d(g, "conv2d");  // groups > 0 and dividing both channel counts, before the product below
  int64_t expected = 0;
  NX_CHECK(checked_mul(w[1], groups, &expected) && expected == x[1], "conv2d: weight of shape ", shape_str(w),
           " with groups=", groups, " expects ", w[1], " x ", groups, " input channels, but the input of shape ",
           shape_str(x), " has ", x[1]);
  return g;
}

namespace {
// conv2d's operands checked and staged for the kernels: contiguous, in the compute dtype.
struct ConvCall {
  Conv2dGeometry g;
  DType dt, cdt;
  Device dev;
  Tensor x, w, bias;
};

ConvCall conv_call(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride_h, int64_t stride_w,
                   int64_t pad_h, int64_t pad_w, int64_t groups, const Tensor& residual = Tensor()) {
  check_nchw(x, "conv2d");
  const Device dev = common_device("conv2d", {x, w, bias, residual});
  const Conv2dGeometry g = conv2d_geometry(x.shape(), w.shape(), stride_h, stride_w, pad_h, pad_w, groups);
  NX_CHECK(!bias.defined() || bias.shape() == Shape{w.shape()[0]}, "conv2d: bias of shape ",
           shape_str(bias.defined() ? bias.shape() : Shape{}), " must have shape (", w.shape()[0], ",)");
  const DType dt = promote_types(x.dtype(), w.dtype()), cdt = compute_dtype(dt);
  return {g,
          dt,
          cdt,
          dev,
          contiguous(cast(x.detach(), cdt)),
          contiguous(cast(w.detach(), cdt)),
          bias.defined() ? contiguous(cast(bias.detach(), cdt)) : Tensor()};
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
              int64_t pad_w, int64_t groups) {
  const ConvCall c = conv_call(x, w, bias, stride_h, stride_w, pad_h, pad_w, groups);
  Tensor out = Tensor::empty({c.g.n, c.g.k, c.g.out_h(), c.g.out_w()}, c.cdt, c.dev);
  kernel::conv2d_forward(c.g, c.x, c.w, c.bias, out);
  return autograd::record("conv2d", cast(out, c.dt), {x, w, bias}, grad::conv2d(x, w, c.g));
}

Tensor conv2d_epilogue(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride_h, int64_t stride_w,
                       int64_t pad_h, int64_t pad_w, int64_t groups, const Tensor& residual, bool relu) {
  NX_CHECK(!autograd::would_record({x, w, bias, residual}),
           "conv2d with a fused add/relu epilogue has no backward; it is made for inference graphs, where no input "
           "requires grad (use conv2d, then the add and relu, to differentiate)");
  const ConvCall c = conv_call(x, w, bias, stride_h, stride_w, pad_h, pad_w, groups, residual);
  const Shape shape{c.g.n, c.g.k, c.g.out_h(), c.g.out_w()};
  NX_CHECK(!residual.defined() || residual.shape() == shape, "conv2d: a residual of shape ",
           shape_str(residual.defined() ? residual.shape() : Shape{}), " must have the output's shape ",
           shape_str(shape));
  Tensor out = Tensor::empty(shape, c.cdt, c.dev);
  kernel::conv2d_forward(c.g, c.x, c.w, c.bias, out, residual.defined() ? contiguous(cast(residual, c.cdt)) : Tensor(),
                         relu);
  return cast(out, c.dt);
}

static Pool2dGeometry pool_geometry(const Tensor& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, const char* op) {
  check_nchw(x, op);
  Pool2dGeometry g{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], kh, kw, sh, sw, 0};
  check_pool2d(g, op);
  return g;
}

Tensor max_pool2d(const Tensor& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw) {
  Pool2dGeometry g = pool_geometry(x, kh, kw, sh, sw, "max_pool2d");
  DType cdt = compute_dtype(x.dtype());
  Tensor xc = contiguous(cast(x.detach(), cdt));
  Tensor out = Tensor::empty({g.n, g.c, g.out_h(), g.out_w()}, cdt, x.device());
  // the winners' indices only where a backward may need them
  Tensor argmax = autograd::would_record({x}) ? Tensor::empty(out.shape(), DType::Int64, x.device()) : Tensor();
  kernel::max_pool2d_forward(g, xc, out, argmax);
  return autograd::record("max_pool2d", cast(out, x.dtype()), {x}, grad::max_pool2d(argmax, g));
}

Tensor avg_pool2d(const Tensor& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw) {
  Pool2dGeometry g = pool_geometry(x, kh, kw, sh, sw, "avg_pool2d");
  DType cdt = compute_dtype(x.dtype());
  Tensor xc = contiguous(cast(x.detach(), cdt));
  Tensor out = Tensor::empty({g.n, g.c, g.out_h(), g.out_w()}, cdt, x.device());
  kernel::avg_pool2d_forward(g, xc, out);
  return autograd::record("avg_pool2d", cast(out, x.dtype()), {x}, grad::avg_pool2d(g));
}

}  // namespace nexus::ops
