// The CUDA backend checked against the CPU kernels on a real GPU: a program, not part of the
// pytest suite (which runs without a GPU). Every op of the op table for every compute dtype it
// accepts, on contiguous, transposed and broadcast operands; every cast pair; reductions over
// several axis sets (twice: the same bits); argmax; matmul (when cuBLAS loads); the allocator's
// reuse. Build: cmake --build <dir> --target nexus_cuda_check; prints one line per failure and
// exits 1 if there was any.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/reduce_kernel.h"

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
  ops::cpu::cast_kernel(x, f);
  return x;
}

Tensor to_gpu(const Tensor& x) {  // keeps x's strides (same storage layout on the device)
  Tensor d = Tensor::view_of(std::make_shared<Storage>(x.storage()->nbytes(), gpu), x.offset(), x.shape(), x.strides(),
                             x.dtype());
  be.copy_bytes(d.storage()->data(), gpu, x.storage()->data(), Device::cpu(), x.storage()->nbytes());
  return d;
}

Tensor to_cpu(const Tensor& d) {
  Tensor x = Tensor::empty(d.shape(), d.dtype());
  be.copy_bytes(x.raw_data(), Device::cpu(), d.raw_data(), gpu, size_t(x.numel() * itemsize(x.dtype())));
  return x;
}

// Compares as float64; rtol 0 for exact dtypes.
void expect_close(const std::string& what, const Tensor& want, const Tensor& got, double rtol) {
  ++checks;
  Tensor a = Tensor::empty(want.shape(), DType::Float64), b = Tensor::empty(got.shape(), DType::Float64);
  ops::cpu::cast_kernel(a, want);
  ops::cpu::cast_kernel(b, got);
  const double *pa = a.data<double>(), *pb = b.data<double>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const bool nan_a = pa[i] != pa[i], nan_b = pb[i] != pb[i];
    const bool ok = (nan_a && nan_b) || pa[i] == pb[i] ||
                    (!nan_a && !nan_b && std::fabs(pa[i] - pb[i]) <= rtol * (std::fabs(pa[i]) + 1e-30) + rtol * 1e-6);
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
        ops::cpu::unary_kernel(op, want, x);
        be.unary(op, got, to_gpu(x));
        expect_close(str(info.name, " ", dtype_name(t), " layout ", layout), want, to_cpu(got), 4 * tol(t));
      }
    }
    for (const auto& info : ops::kBinaryOps) {
      const auto op = ops::BinaryOp(&info - ops::kBinaryOps);
      if (!ops::accepts(info.domain, t) || ops::operand_dtype(info.domain, t) != t) continue;
      const DType rt = info.result == ops::OpResult::Bool ? DType::Bool : t;
      for (int layout = 0; layout < 3; ++layout) {
        Tensor a = random({64, 33}, t), b = random({64, 33}, t);
        if (layout == 1) b = transposed(random({33, 64}, t));
        if (layout == 2) {  // b broadcast along rows (stride 0)
          Tensor row = random({1, 33}, t);
          b = Tensor::view_of(row.storage(), 0, {64, 33}, {0, 1}, t);
        }
        if (op == ops::BinaryOp::FloorDiv || op == ops::BinaryOp::Remainder || op == ops::BinaryOp::Div) {
          if (t == DType::Int32 || t == DType::Int64) continue;  // x // 0: the front end raises first
        }
        Tensor want = Tensor::empty({64, 33}, rt), got = Tensor::empty({64, 33}, rt, gpu);
        ops::cpu::binary_kernel(op, want, a, b);
        be.binary(op, got, to_gpu(a), to_gpu(b));
        expect_close(str(info.name, " ", dtype_name(t), " layout ", layout), want, to_cpu(got), 4 * tol(t));
      }
    }
    Tensor c = random({40, 30}, DType::Bool), a = random({40, 30}, t), b = transposed(random({30, 40}, t));
    Tensor want = Tensor::empty({40, 30}, t), got = Tensor::empty({40, 30}, t, gpu);
    ops::cpu::where_kernel(want, c, a, b);
    be.where(got, to_gpu(c), to_gpu(a), to_gpu(b));
    expect_close(str("where ", dtype_name(t)), want, to_cpu(got), 0);
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
        ops::cpu::cast_kernel(sx, s);
      }
      Tensor want = Tensor::empty({7, 300}, to), got = Tensor::empty({7, 300}, to, gpu);
      ops::cpu::cast_kernel(want, transposed(x));
      be.cast(got, to_gpu(transposed(x)));
      expect_close(str("cast ", dtype_name(from), " -> ", dtype_name(to)), want, to_cpu(got), 0);
      Tensor f = Tensor::empty({1000}, to, gpu), fw = Tensor::empty({1000}, to);
      be.fill(f, -2.75);
      ops::cpu::fill_kernel(fw, -2.75);
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
        ops::cpu::reduce_kernel(op, want, x, axes);
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
      ops::cpu::cast_kernel(Tensor::view_of(x.storage(), 3 * 1000 + 500, {1}, {1}, t), v);
    }
    Tensor want = Tensor::empty({50}, DType::Int64), got = Tensor::empty({50}, DType::Int64, gpu);
    ops::cpu::argmax_kernel(want, x, 50, 1000);
    be.argmax(got, to_gpu(x), 50, 1000);
    expect_close(str("argmax ", dtype_name(t)), want, to_cpu(got), 0);
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
      ops::cpu::cast_kernel(a64, a);
      ops::cpu::cast_kernel(b64, b);
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
      expect_close(str("matmul ", dtype_name(t), " layout ", layout), want, to_cpu(got),
                   t == DType::Float32 ? 1e-4 : 1e-12);
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
    check_allocator();
    be.synchronize(0);
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    ++failures;
  }
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
