// The CUDA backend checked against the CPU kernels on a real GPU: a program, not part of the
// pytest suite (which runs without a GPU). Every op of the op table for every compute dtype it
// accepts, on contiguous, transposed and broadcast operands; every cast pair; reductions over
// several axis sets (twice: the same bits); argmax; matmul (when cuBLAS loads); conv2d and its
// gradients over several geometries (twice: the same bits); max/avg pooling and their gradients
// (bit for bit, NaN and ties included); the allocator's reuse. Build: cmake --build <dir> --target nexus_cuda_check; prints one line per failure and
// exits 1 if there was any.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "codegen/program.h"
#include "ops/cpu/kernels.h"

using namespace nexus;

namespace {

int failures = 0, checks = 0;
std::mt19937_64 rng(42);
cuda::CudaBackend& be = cuda::cuda_backend();
const Device gpu = Device::cuda(0);

Tensor random(const Shape& shape, DType t) {
  Tensor x = Tensor::empty(shape, t);
  std::uniform_real_distribution<double> u(-3, 3);
  Tensor f = Tensor::empty(shape, DType::Float64);
  double* p = f.data<double>();
  for (int64_t i = 0; i < f.numel(); ++i) p[i] = t == DType::Bool ? double(rng() % 2) : u(rng);
  if (t == DType::Int32 || t == DType::Int64)
    for (int64_t i = 0; i < f.numel(); ++i) p[i] = std::round(p[i] * 10) + (p[i] == 0 ? 1 : 0);
  ops::cpu::kernels().cast(x, f);
  return x;
}

Tensor to_gpu(const Tensor& x) {  // keeps x's strides (same storage layout on the device)
  Tensor d = Tensor::view_of(std::make_shared<Storage>(x.storage()->nbytes(), gpu), x.offset(), x.shape(), x.strides(),
                             x.dtype());
  be.copy_bytes(d.storage()->data(), gpu, x.storage()->data(), Device::cpu(), x.storage()->nbytes(), false);
  return d;
}

Tensor to_cpu(const Tensor& d) {
  Tensor x = Tensor::empty(d.shape(), d.dtype());
  be.copy_bytes(x.raw_data(), Device::cpu(), d.raw_data(), gpu, size_t(x.numel() * itemsize(x.dtype())), false);
  return x;
}

// Compares as float64: within rtol of the CPU's value, plus rtol / 100 absolute (a result near zero
// from cancelling terms, as gelu_grad's for negative inputs, keeps the terms' rounding); exact
// for rtol 0 (integer dtypes).
void expect_close(const std::string& what, const Tensor& want, const Tensor& got, double rtol) {
  ++checks;
  Tensor a = Tensor::empty(want.shape(), DType::Float64), b = Tensor::empty(got.shape(), DType::Float64);
  ops::cpu::kernels().cast(a, want);
  ops::cpu::kernels().cast(b, got);
  const double *pa = a.data<double>(), *pb = b.data<double>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const bool nan_a = pa[i] != pa[i], nan_b = pb[i] != pb[i];
    const bool ok = (nan_a && nan_b) || pa[i] == pb[i] ||
                    (!nan_a && !nan_b && std::fabs(pa[i] - pb[i]) <= rtol * (std::fabs(pa[i]) + 1e-2));
    if (!ok) {
      std::printf("FAIL %s: element %ld cpu %.17g gpu %.17g\n", what.c_str(), long(i), pa[i], pb[i]);
      ++failures;
      return;
    }
  }
}

double tol(DType t) { return t == DType::Float32 ? 2e-6 : t == DType::Float64 ? 1e-14 : 0.0; }

// Transposed view of a 2-D tensor with shape (c, r) stored: returns shape (r, c) strided.
Tensor transposed(const Tensor& x) {
  return Tensor::view_of(x.storage(), x.offset(), {x.dim(1), x.dim(0)}, {x.strides()[1], x.strides()[0]}, x.dtype());
}

const DType kCompute[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool};

void check_elementwise() {
  for (DType t : kCompute) {
    for (const auto& info : ops::kUnaryOps) {
      const auto op = ops::UnaryOp(&info - ops::kUnaryOps);
      if (!ops::accepts(info.domain, t) || ops::operand_dtype(info.domain, t) != t) continue;
      for (int layout = 0; layout < 2; ++layout) {
        Tensor x = random({37, 53}, t);
        if (layout == 1) x = transposed(random({53, 37}, t));
        Tensor want = Tensor::empty({37, 53}, t), got = Tensor::empty({37, 53}, t, gpu);
        ops::cpu::kernels().unary(op, want, x);
        be.unary(op, got, to_gpu(x));
        expect_close(str(info.name, " ", dtype_name(t), " layout ", layout), want, to_cpu(got), 4 * tol(t));
      }
    }
    for (const auto& info : ops::kBinaryOps) {
      const auto op = ops::BinaryOp(&info - ops::kBinaryOps);
      if (!ops::accepts(info.domain, t) || ops::operand_dtype(info.domain, t) != t) continue;
      const DType rt = info.result == ops::OpResult::Bool ? DType::Bool : t;
      for (int layout = 0; layout < 5; ++layout) {
        Tensor a = random({64, 33}, t), b = random({64, 33}, t);
        if (layout == 1) b = transposed(random({33, 64}, t));
        if (layout == 2) {  // b broadcast along rows (stride 0)
          Tensor row = random({1, 33}, t);
          b = Tensor::view_of(row.storage(), 0, {64, 33}, {0, 1}, t);
        }
        if (layout >= 3) {  // a broadcast scalar (the flat path): b, then a
          Tensor one = random({1}, t);
          (layout == 3 ? b : a) = Tensor::view_of(one.storage(), 0, {64, 33}, {0, 0}, t);
        }
        if (op == ops::BinaryOp::FloorDiv || op == ops::BinaryOp::Remainder || op == ops::BinaryOp::Div) {
          if (t == DType::Int32 || t == DType::Int64) continue;  // x // 0: the front end raises first
        }
        Tensor want = Tensor::empty({64, 33}, rt), got = Tensor::empty({64, 33}, rt, gpu);
        ops::cpu::kernels().binary(op, want, a, b);
        be.binary(op, got, to_gpu(a), to_gpu(b));
        expect_close(str(info.name, " ", dtype_name(t), " layout ", layout), want, to_cpu(got), 4 * tol(t));
      }
    }
    Tensor c = random({40, 30}, DType::Bool), a = random({40, 30}, t), b = transposed(random({30, 40}, t));
    Tensor want = Tensor::empty({40, 30}, t), got = Tensor::empty({40, 30}, t, gpu);
    ops::cpu::kernels().where(want, c, a, b);
    be.where(got, to_gpu(c), to_gpu(a), to_gpu(b));
    expect_close(str("where ", dtype_name(t)), want, to_cpu(got), 0);
    const Tensor one = random({1}, t), scalar = Tensor::view_of(one.storage(), 0, {40, 30}, {0, 0}, t);
    ops::cpu::kernels().where(want, c, a, scalar);  // the flat path: contiguous c and a, scalar b
    be.where(got, to_gpu(c), to_gpu(a), to_gpu(scalar));
    expect_close(str("where with a scalar ", dtype_name(t)), want, to_cpu(got), 0);
  }
}

void check_cast_and_fill() {
  const DType all[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                       DType::Int32,   DType::Int64,   DType::Bool};
  for (DType from : all)
    for (DType to : all) {
      Tensor x = random({300, 7}, from);
      if (from == DType::Float32 || from == DType::Float64) {  // specials: nan, inf, saturation
        Tensor s = Tensor::empty({6}, DType::Float64);
        const double v[] = {NAN, INFINITY, -INFINITY, 1e30, -1e30, 65519.99};
        std::memcpy(s.data<double>(), v, sizeof v);
        Tensor sx = Tensor::view_of(x.storage(), 0, {6}, {1}, from);
        ops::cpu::kernels().cast(sx, s);
      }
      Tensor want = Tensor::empty({7, 300}, to), got = Tensor::empty({7, 300}, to, gpu);
      ops::cpu::kernels().cast(want, transposed(x));
      be.cast(got, to_gpu(transposed(x)));
      expect_close(str("cast ", dtype_name(from), " -> ", dtype_name(to)), want, to_cpu(got), 0);
      Tensor f = Tensor::empty({1000}, to, gpu), fw = Tensor::empty({1000}, to);
      be.fill(f, -2.75);
      ops::cpu::kernels().fill(fw, -2.75);
      expect_close(str("fill ", dtype_name(to)), fw, to_cpu(f), 0);
    }
}

void check_reduce() {
  const std::vector<std::vector<int64_t>> axes_sets = {{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (DType t : kCompute)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
      for (const auto& axes : axes_sets) {
        Tensor x = random({17, 300, 9}, t);
        Shape kept;
        for (int64_t d = 0; d < 3; ++d)
          if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(x.dim(d));
        const DType ot = op == ReduceOp::Sum && !is_floating(t) ? DType::Int64 : t;
        Tensor want = Tensor::empty(kept, ot), got = Tensor::empty(kept, ot, gpu), again = Tensor::empty(kept, ot, gpu);
        ops::cpu::kernels().reduce(op, want, x, axes);
        Tensor dx = to_gpu(x);
        be.reduce(op, got, dx, axes);
        be.reduce(op, again, dx, axes);
        const std::string name =
            str("reduce ", reduce_op_name(op), " ", dtype_name(t), " axes ", axes.size(), "@", axes[0]);
        expect_close(name, want, to_cpu(got), op == ReduceOp::Sum ? 100 * tol(t) : 0);
        expect_close(name + " run to run", to_cpu(got), to_cpu(again), 0);
      }
}

void check_argmax() {
  for (DType t : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    Tensor x = random({50, 1000}, t);
    if (is_floating(t)) {  // a NaN in row 3 wins
      Tensor v = Tensor::empty({1}, DType::Float64);
      v.data<double>()[0] = NAN;
      ops::cpu::kernels().cast(Tensor::view_of(x.storage(), 3 * 1000 + 500, {1}, {1}, t), v);
    }
    Tensor want = Tensor::empty({50}, DType::Int64), got = Tensor::empty({50}, DType::Int64, gpu);
    ops::cpu::kernels().argmax(want, x, 50, 1000);
    be.argmax(got, to_gpu(x), 50, 1000);
    expect_close(str("argmax ", dtype_name(t)), want, to_cpu(got), 0);
  }
}

// Compares with an absolute slack of tol * max|want| (a GEMM's rounding scales with its terms, not
// with each result, which may be near zero).
void expect_near(const std::string& what, const Tensor& want, const Tensor& got, double tol) {
  Tensor a = Tensor::empty(want.shape(), DType::Float64);
  ops::cpu::kernels().cast(a, want);
  double scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) scale = std::max(scale, std::fabs(a.data<double>()[i]));
  Tensor b = Tensor::empty(got.shape(), DType::Float64);
  ops::cpu::kernels().cast(b, got);
  ++checks;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double pa = a.data<double>()[i], pb = b.data<double>()[i];
    if (!(std::fabs(pa - pb) <= tol * (std::fabs(pa) + scale))) {
      std::printf("FAIL %s: element %ld cpu %.17g gpu %.17g\n", what.c_str(), long(i), pa, pb);
      ++failures;
      return;
    }
  }
}

void check_matmul() {
  for (DType t : {DType::Float32, DType::Float64})
    for (int layout = 0; layout < 4; ++layout) {
      const int64_t B = 3, m = 45, k = 70, n = 38;
      Tensor a = random({B, m, k}, t), b = random({B, k, n}, t);
      if (layout == 1)  // a transposed in its last two dims
        a = Tensor::view_of(random({B, k, m}, t).storage(), 0, {B, m, k}, {m * k, 1, m}, t);
      if (layout == 2)  // b broadcast over the batch
        b = Tensor::view_of(random({k, n}, t).storage(), 0, {B, k, n}, {0, n, 1}, t);
      if (layout == 3)  // b with strided columns: needs a copy
        b = Tensor::view_of(random({B, k, 2 * n}, t).storage(), 0, {B, k, n}, {k * 2 * n, 2 * n, 2}, t);
      Tensor want = Tensor::zeros({B, m, n}, DType::Float64), got = Tensor::empty({B, m, n}, t, gpu);
      Tensor a64 = Tensor::empty(a.shape(), DType::Float64), b64 = Tensor::empty(b.shape(), DType::Float64);
      ops::cpu::kernels().cast(a64, a);
      ops::cpu::kernels().cast(b64, b);
      double *w = want.data<double>(), *pa = a64.data<double>(), *pb = b64.data<double>();
      for (int64_t z = 0; z < B; ++z)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            for (int64_t q = 0; q < k; ++q) w[(z * m + i) * n + j] += pa[(z * m + i) * k + q] * pb[(z * k + q) * n + j];
      try {
        be.matmul(got, to_gpu(a), to_gpu(b));
      } catch (const DeviceError& e) {
        std::printf("SKIP matmul: %s\n", e.what());
        return;
      }
      expect_near(str("matmul ", dtype_name(t), " layout ", layout), want, to_cpu(got),
                  t == DType::Float32 ? 1e-5 : 1e-12);
    }
}

// A gradient tensor on the GPU holding garbage, to show that the backend overwrites it.
Tensor dirty(const Shape& shape, DType t) {
  Tensor d = Tensor::empty(shape, t, gpu);
  be.fill(d, 7.25);
  return d;
}

template <class T> T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

struct ConvCase {
  int64_t n, c, h, w, k, kh, kw, stride, pad;
};

template <class T> void check_conv_case(const ConvCase& cc, DType t) {
  ops::Conv2dGeometry g{cc.n, cc.c, cc.h, cc.w, cc.k, cc.kh, cc.kw, cc.stride, cc.stride, cc.pad, cc.pad};
  const std::string name = str("conv2d ", dtype_name(t), " n", cc.n, " c", cc.c, " ", cc.h, "x", cc.w, " k", cc.k, " ",
                               cc.kh, "x", cc.kw, " s", cc.stride, " p", cc.pad);
  const Shape xs{g.n, g.c, g.h, g.w}, ws{g.k, g.c, g.kh, g.kw}, ys{g.n, g.k, g.out_h(), g.out_w()};
  Tensor x = random(xs, t), w = random(ws, t), bias = random({g.k}, t), dy = random(ys, t);
  Tensor gx = to_gpu(x), gw = to_gpu(w), gbias = to_gpu(bias), gdy = to_gpu(dy);
  const double eps = t == DType::Float32 ? 1e-5 : 1e-13;
  for (bool with_bias : {true, false}) {
    Tensor want = Tensor::empty(ys, t), got = dirty(ys, t);
    ops::cpu::kernels().conv2d_forward(g, x, w, with_bias ? bias : Tensor(), want, Tensor(), false);
    be.conv2d_forward(g, gx, gw, with_bias ? gbias : Tensor(), got);
    expect_near(name + (with_bias ? " forward" : " forward without bias"), want, to_cpu(got), eps);
  }
  Tensor dx = Tensor::empty(xs, t), dw = Tensor::empty(ws, t), db = Tensor::empty({g.k}, t);
  ops::cpu::kernels().conv2d_backward(g, x, w, dy, dx, dw, db);
  Tensor got[2][3];
  for (auto& run : got) {
    run[0] = dirty(xs, t), run[1] = dirty(ws, t), run[2] = dirty({g.k}, t);
    be.conv2d_backward(g, gx, gw, gdy, run[0], run[1], run[2]);
  }
  const char* grads[] = {" dx", " dw", " dbias"};
  const Tensor want[] = {dx, dw, db};
  for (int i = 0; i < 3; ++i) {
    expect_near(name + grads[i], want[i], to_cpu(got[0][i]), eps);
    expect_close(name + grads[i] + " run to run", to_cpu(got[0][i]), to_cpu(got[1][i]), 0);
  }
  // Undefined gradients are skipped: dx alone, then dw alone.
  Tensor only_dx = dirty(xs, t), only_dw = dirty(ws, t);
  be.conv2d_backward(g, gx, gw, gdy, only_dx, Tensor(), Tensor());
  be.conv2d_backward(g, gx, gw, gdy, Tensor(), only_dw, Tensor());
  expect_close(name + " dx alone", to_cpu(got[0][0]), to_cpu(only_dx), 0);
  expect_close(name + " dw alone", to_cpu(got[0][1]), to_cpu(only_dw), 0);
}

void check_conv() {
  const ConvCase cases[] = {
      {3, 16, 7, 9, 16, 1, 1, 1, 0},  // 1x1 stride 1 unpadded: no im2col
      {1, 1, 13, 11, 4, 3, 3, 1, 1},  {3, 16, 9, 9, 8, 3, 3, 2, 0}, {3, 3, 11, 8, 16, 5, 5, 1, 2},
      {1, 16, 15, 13, 1, 5, 5, 2, 2}, {3, 1, 5, 5, 3, 5, 5, 1, 0},  // kernel the size of the image
      {3, 2, 8, 7, 3, 1, 1, 2, 1},                                  // 1x1 strided and padded: through im2col
      {0, 3, 6, 6, 4, 3, 3, 1, 1},                                  // an empty batch: dw and dbias are zeros
  };
  try {
    for (const ConvCase& cc : cases) {
      check_conv_case<float>(cc, DType::Float32);
      check_conv_case<double>(cc, DType::Float64);
    }
  } catch (const DeviceError& e) {
    std::printf("SKIP conv2d: %s\n", e.what());
  }
}

struct PoolCase {
  int64_t n, c, h, w, kh, kw, sh, sw, pad;
};

// Pooling adds in the host's order: every result is compared bit for bit.
template <class T> void check_pool_case(const PoolCase& pc, DType t) {
  ops::Pool2dGeometry g{pc.n, pc.c, pc.h, pc.w, pc.kh, pc.kw, pc.sh, pc.sw, pc.pad};
  const std::string name = str(dtype_name(t), " n", pc.n, " c", pc.c, " ", pc.h, "x", pc.w, " kernel ", pc.kh, "x",
                               pc.kw, " stride ", pc.sh, "x", pc.sw, " p", pc.pad);
  const Shape xs{g.n, g.c, g.h, g.w}, ys{g.n, g.c, g.out_h(), g.out_w()};
  Tensor x = random(xs, t), dy = random(ys, t);
  if (g.n > 0) {  // a NaN in plane 0 and a run of ties in the last plane
    T* p = x.data<T>();
    p[(g.h / 2) * g.w + g.w / 2] = T(NAN);
    T* last = p + (g.n * g.c - 1) * g.h * g.w;
    for (int64_t i = 0; i < std::min<int64_t>(g.h * g.w, 2 * g.w); ++i) last[i] = T(2.5);
  }
  Tensor gx = to_gpu(x), gdy = to_gpu(dy);
  Tensor y = Tensor::empty(ys, t), idx = Tensor::empty(ys, DType::Int64), dx = Tensor::empty(xs, t);
  Tensor got_y = dirty(ys, t), got_idx = Tensor::empty(ys, DType::Int64, gpu), got_dx = dirty(xs, t);
  ops::cpu::kernels().max_pool2d_forward(g, x, y, idx);
  ops::cpu::kernels().max_pool2d_backward(g, dy, idx, dx);
  be.max_pool2d_forward(g, gx, got_y, got_idx);
  be.max_pool2d_backward(g, gdy, got_idx, got_dx);
  expect_close("max_pool2d " + name, y, to_cpu(got_y), 0);
  expect_close("max_pool2d argmax " + name, idx, to_cpu(got_idx), 0);
  expect_close("max_pool2d backward " + name, dx, to_cpu(got_dx), 0);
  Tensor no_idx = dirty(ys, t);
  be.max_pool2d_forward(g, gx, no_idx, Tensor());
  expect_close("max_pool2d without argmax " + name, y, to_cpu(no_idx), 0);

  ops::cpu::kernels().avg_pool2d_forward(g, x, y);
  ops::cpu::kernels().avg_pool2d_backward(g, dy, dx);
  be.avg_pool2d_forward(g, gx, got_y);
  be.avg_pool2d_backward(g, gdy, got_dx);
  expect_close("avg_pool2d " + name, y, to_cpu(got_y), 0);
  expect_close("avg_pool2d backward " + name, dx, to_cpu(got_dx), 0);
}

void check_pool() {
  const PoolCase cases[] = {
      {3, 16, 9, 9, 2, 2, 2, 2, 0}, {1, 1, 7, 11, 3, 3, 1, 1, 1},  // overlapping windows
      {3, 2, 10, 7, 3, 3, 2, 2, 1}, {1, 16, 8, 9, 5, 5, 2, 2, 2}, {3, 3, 6, 5, 1, 1, 1, 1, 0},
      {3, 4, 9, 8, 2, 3, 1, 2, 1},  {3, 1, 5, 5, 5, 5, 1, 1, 0},  // one window: the whole plane
      {0, 2, 4, 4, 2, 2, 2, 2, 0},
  };
  for (const PoolCase& pc : cases) {
    check_pool_case<float>(pc, DType::Float32);
    check_pool_case<double>(pc, DType::Float64);
  }
}

void check_allocator() {
  const auto before = be.allocator().stats(0);
  { Tensor x = Tensor::empty({1000}, DType::Float32, gpu); }
  { Tensor y = Tensor::empty({1001}, DType::Float32, gpu); }  // same 4 KiB class: a hit
  const auto after = be.allocator().stats(0);
  ++checks;
  if (after.hits <= before.hits) {
    std::printf("FAIL allocator: no cache hit for a repeated size class\n");
    ++failures;
  }
  std::printf("allocator: %zu allocated, %zu cached, peak %zu, %ld hits, %ld misses\n", after.allocated_bytes,
              after.cached_bytes, after.peak_allocated_bytes, long(after.hits), long(after.misses));
}

}  // namespace

// A generated kernel (the CUDA dialect, compiled by NVRTC and launched by launch_generated) against
// the same Program on the host: relu(x * c + b) over a broadcast b and a contiguous, then a
// transposed, x (rows walked through two outer dims; a strided inner walk).
void check_generated() {
  using codegen::Instr;
  using codegen::InstrOp;
  codegen::FusedKernel k;
  k.inputs = {DType::Float32, DType::Float32};
  k.num_consts = 1;
  k.const_dtypes = {DType::Float32};
  k.instrs = {Instr{InstrOp::Load, DType::Float32, 0},
              Instr{InstrOp::Load, DType::Float32, 1},
              Instr{InstrOp::Const, DType::Float32, 0},
              Instr{InstrOp::Binary, DType::Float32, 0, 2, -1, ops::UnaryOp::Neg, ops::BinaryOp::Mul},
              Instr{InstrOp::Binary, DType::Float32, 3, 1, -1, ops::UnaryOp::Neg, ops::BinaryOp::Add},
              Instr{InstrOp::Unary, DType::Float32, 4, -1, -1, ops::UnaryOp::Relu}};
  k.outputs = {5};
  k.ndim = 3;
  codegen::Program prog(k);
  const Tensor b = random({4, 1}, DType::Float32);
  for (bool transpose : {false, true}) {
    Tensor x = random({6, 4, 10}, DType::Float32);
    if (transpose) x = Tensor::view_of(x.storage(), 0, {6, 4, 10}, {1, 60, 6}, DType::Float32);
    const std::vector<double> c = {0.75};
    const Tensor want = prog.run({x, b}, c)[0];
    const Tensor got = prog.run({to_gpu(x), to_gpu(b)}, c)[0];
    expect_close(transpose ? "generated kernel, transposed x" : "generated kernel", want, to_cpu(got),
                 tol(DType::Float32));
  }
}

int main() {
  device::register_backend(DeviceType::CUDA, &be);
  std::printf("devices: %d (%s)\n", be.device_count(), be.unavailable_reason().c_str());
  if (be.device_count() == 0) return 2;
  try {
    check_elementwise();
    check_cast_and_fill();
    check_reduce();
    check_argmax();
    check_matmul();
    check_conv();
    check_pool();
    check_allocator();
    check_generated();
    be.synchronize(0);
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    ++failures;
  }
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
