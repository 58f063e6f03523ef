// Casts between every pair of the seven dtypes and fill, on the device. A cast converts as the
// CPU's cast_kernel (ops/cpu/elementwise_kernel.cpp) does: halves through float32 (round to
// nearest even, the prelude's f2h/f2b), integers from anything through double, saturating, NaN
// to 0; bool is "not zero" (NaN is true).
#include "kernels/common.cuh"

namespace nexus::cuda {
namespace {

// A register of dtype T's value as storage of dtype U.
template <DType U, class R> __device__ __forceinline__ typename Elem<U>::type convert(R v) {
  using S = typename Elem<U>::type;
  if constexpr (U == DType::Bool) {
    return v != R(0);
  } else if constexpr (U == DType::Float16) {
    return kern::f2h(float(double(v)));
  } else if constexpr (U == DType::BFloat16) {
    return kern::f2b(float(double(v)));
  } else if constexpr (U == DType::Float32 || U == DType::Float64) {
    return static_cast<S>(v);
  } else {  // integers: through double, saturating, NaN -> 0 (the CPU's from_double)
    const double d = double(v);
    constexpr S hi = U == DType::Int32 ? S(2147483647) : S(9223372036854775807LL);
    constexpr S lo = S(-hi - 1);
    if (d != d) return S(0);
    if (d >= double(hi)) return hi;
    if (d <= double(lo)) return lo;
    return static_cast<S>(d);
  }
}

template <DType T> __device__ __forceinline__ typename Elem<T>::reg load(const typename Elem<T>::type* p) {
  if constexpr (T == DType::Float16) return kern::h2f(*p);
  else if constexpr (T == DType::BFloat16) return kern::b2f(*p);
  else return *p;
}

template <DType U, DType T> __global__ void cast_kernel(Operands<2> g, int64_t n) {
  using SU = typename Elem<U>::type;
  using ST = typename Elem<T>::type;
  SU* out = static_cast<SU*>(g.ptr[0]);
  const ST* in = static_cast<const ST*>(g.ptr[1]);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[2] = {i, i};
    if (!g.contiguous) g.offsets(i, off);
    if constexpr (U == T) out[off[0]] = in[off[1]];  // the same bits (a NaN's payload too)
    else out[off[0]] = convert<U>(load<T>(in + off[1]));
  }
}

template <class W> __global__ void fill_kernel(W* out, W value, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) out[i] = value;
}

// Calls fn with the dtype as a compile-time constant.
template <class Fn> void with_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(std::integral_constant<DType, DType::Float32>{});
    case DType::Float64: return fn(std::integral_constant<DType, DType::Float64>{});
    case DType::Float16: return fn(std::integral_constant<DType, DType::Float16>{});
    case DType::BFloat16: return fn(std::integral_constant<DType, DType::BFloat16>{});
    case DType::Int32: return fn(std::integral_constant<DType, DType::Int32>{});
    case DType::Int64: return fn(std::integral_constant<DType, DType::Int64>{});
    case DType::Bool: return fn(std::integral_constant<DType, DType::Bool>{});
  }
}

}  // namespace

void launch_cast(DType dst, DType src, const Operands<2>& g, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_dtype(dst, [&](auto u) {
    with_dtype(src, [&](auto t) {
      cast_kernel<decltype(u)::value, decltype(t)::value><<<grid_for(n), kThreads, 0, stream>>>(g, n);
    });
  });
  check_launch("cast");
}

void launch_fill(void* out, int itemsize, uint64_t bits, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = grid_for(n);
  switch (itemsize) {
    case 1: fill_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint8_t*>(out), uint8_t(bits), n); break;
    case 2: fill_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint16_t*>(out), uint16_t(bits), n); break;
    case 4: fill_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint32_t*>(out), uint32_t(bits), n); break;
    case 8:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<unsigned long long*>(out), (unsigned long long)bits, n);
      break;
    default: throw InternalError(str("internal error, please report: CUDA fill of ", itemsize, "-byte elements"));
  }
  check_launch("fill");
}

}  // namespace nexus::cuda
