// Reductions (sum, max, min over any axes) and argmax on the device. One block per output element
// (a grid-stride loop over outputs when there are more than kMaxBlocks): thread t combines
// elements t, t + T, t + 2T, ... in order, then the block combines its threads in a fixed tree,
// so a result has the same bits on every run. Few outputs of many elements each (a full sum,
// batch-norm statistics) split each output into chunks reduced by blocks of their own, then
// combine the chunks in order (reduce_parts in geometry.cpp decides): still the same bits. Float sums accumulate in double and integer sums
// in int64 (the CPU's accumulators, ops/cpu/reduce_kernel.cpp); max/min propagate NaN with the
// op table's kern::pick_max/pick_min.
#include "kernels/common.cuh"

namespace nexus::cuda {
namespace {

constexpr int kReduceThreads = 256;

template <class T> struct SumOp {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  __device__ Acc init(T) const { return Acc(0); }
  __device__ Acc operator()(Acc a, Acc b) const { return kern::add(a, b); }  // integers wrap
};
template <class T> struct MaxOp {
  using Acc = T;
  __device__ Acc init(T first) const { return first; }
  __device__ Acc operator()(Acc a, Acc b) const { return kern::pick_max(a, b); }
};
template <class T> struct MinOp {
  using Acc = T;
  __device__ Acc init(T first) const { return first; }
  __device__ Acc operator()(Acc a, Acc b) const { return kern::pick_min(a, b); }
};

// Threads per block: a power of two from 32 to kReduceThreads, no more than the elements need.
int threads_for(int64_t n) {
  int t = 32;
  while (t < kReduceThreads && t < n) t *= 2;
  return t;
}

// The block's reduction of elements [begin, end) of one output (base: its first element):
// thread t combines elements begin + t, begin + t + T, ... in order from `init`, then the threads
// combine in a fixed tree through `part` (kReduceThreads slots). Thread 0 returns the result.
template <class T, class Op> __device__ typename Op::Acc block_reduce(const T* base, const ReduceGeometry& g,
                                                                      int64_t begin, int64_t end, const Op& op,
                                                                      typename Op::Acc init, typename Op::Acc* part) {
  using Acc = typename Op::Acc;
  const int tid = threadIdx.x;
  Acc acc = init;
  for (int64_t r = begin + tid; r < end; r += blockDim.x)
    acc = op(acc, Acc(base[strided_offset(r, g.red_ndim, g.red_shape, g.red_stride)]));
  part[tid] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (tid < s) part[tid] = op(part[tid], part[tid + s]);
    __syncthreads();
  }
  const Acc result = part[0];
  __syncthreads();  // every thread has read part[0] before the next output overwrites it
  return result;
}

template <class T, class R, class Op> __global__ void reduce_kernel(ReduceGeometry g, Op op) {
  using Acc = typename Op::Acc;
  __shared__ Acc part[kReduceThreads];
  const T* x = static_cast<const T*>(g.x);
  R* out = static_cast<R*>(g.out);
  const int tid = threadIdx.x;
  for (int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
    const T* base = x + strided_offset(o, g.kept_ndim, g.kept_shape, g.kept_stride);
    // An empty sum's init ignores its argument; max/min never reach here with no elements.
    const Acc acc = block_reduce<T>(base, g, 0, g.n_red, op, op.init(g.n_red > 0 ? base[0] : T(0)), part);
    if (tid == 0) out[o] = R(acc);
  }
}

// A split reduction's first pass: block (p, o) reduces chunk p of output o's elements, in the
// same per-thread order and tree as reduce_kernel, into partials[o * parts + p].
template <class T, class Op> __global__ void reduce_chunks_kernel(ReduceGeometry g, Op op) {
  using Acc = typename Op::Acc;
  __shared__ Acc part[kReduceThreads];
  const T* x = static_cast<const T*>(g.x);
  Acc* partials = static_cast<Acc*>(g.partials);
  const int tid = threadIdx.x;
  const int64_t p = blockIdx.x;
  const int64_t begin = p * g.chunk, end = begin + g.chunk < g.n_red ? begin + g.chunk : g.n_red;
  for (int64_t o = blockIdx.y; o < g.n_out; o += gridDim.y) {
    const T* base = x + strided_offset(o, g.kept_ndim, g.kept_shape, g.kept_stride);
    const Acc first = op.init(base[strided_offset(begin, g.red_ndim, g.red_shape, g.red_stride)]);
    const Acc acc = block_reduce<T>(base, g, begin, end, op, first, part);
    if (tid == 0) partials[o * g.parts + p] = acc;
  }
}

// The second pass: each output combines its chunks' partials in chunk order.
template <class R, class Op> __global__ void reduce_partials_kernel(ReduceGeometry g, Op op) {
  using Acc = typename Op::Acc;
  const Acc* partials = static_cast<const Acc*>(g.partials);
  R* out = static_cast<R*>(g.out);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < g.n_out; o += step) {
    Acc acc = partials[o * g.parts];
    for (int64_t p = 1; p < g.parts; ++p) acc = op(acc, partials[o * g.parts + p]);
    out[o] = R(acc);
  }
}

template <class T, class R, class Op> void launch_typed(const ReduceGeometry& g, cudaStream_t stream) {
  static_assert(sizeof(typename Op::Acc) <= 8, "a split reduction's partials are 8 bytes each");
  if (g.parts > 1) {
    const dim3 grid(unsigned(g.parts), unsigned(g.n_out < 65535 ? g.n_out : 65535));
    reduce_chunks_kernel<T, Op><<<grid, threads_for(g.chunk), 0, stream>>>(g, Op{});
    reduce_partials_kernel<R, Op><<<grid_for(g.n_out), kThreads, 0, stream>>>(g, Op{});
    return;
  }
  const unsigned blocks = unsigned(g.n_out < kMaxBlocks ? g.n_out : kMaxBlocks);
  reduce_kernel<T, R, Op><<<blocks, threads_for(g.n_red), 0, stream>>>(g, Op{});
}

// The better of two (value, index) candidates: a NaN, else the larger value, ties to the lower index.
template <class T> __device__ __forceinline__ bool better(T v, int64_t i, T best, int64_t bi) {
  const bool vnan = v != v, bnan = best != best;
  if (vnan || bnan) return vnan && (!bnan || i < bi);
  return v > best || (v == best && i < bi);
}

template <class T> __global__ void argmax_kernel(int64_t* out, const T* x, int64_t rows, int64_t n) {
  __shared__ T val[kReduceThreads];
  __shared__ int64_t idx[kReduceThreads];
  const int tid = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    T best = row[0];
    int64_t bi = 0;
    for (int64_t i = tid; i < n; i += blockDim.x)
      if (better(row[i], i, best, bi)) best = row[i], bi = i;
    val[tid] = best;
    idx[tid] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (tid < s && better(val[tid + s], idx[tid + s], val[tid], idx[tid])) {
        val[tid] = val[tid + s];
        idx[tid] = idx[tid + s];
      }
      __syncthreads();
    }
    if (tid == 0) out[r] = idx[0];
    __syncthreads();
  }
}

}  // namespace

void launch_reduce(ReduceOp op, DType x, DType out, const ReduceGeometry& g, cudaStream_t stream) {
  if (g.n_out == 0) return;
  dispatch_compute(x, "reduce", [&](auto v) {
    using T = decltype(v);
    if (op == ReduceOp::Sum && out == DType::Int64 && x != DType::Int64) {
      if constexpr (!std::is_floating_point_v<T>) return launch_typed<T, int64_t, SumOp<T>>(g, stream);
    } else if (out == x) {
      if (op == ReduceOp::Sum) return launch_typed<T, T, SumOp<T>>(g, stream);
      if (op == ReduceOp::Max) return launch_typed<T, T, MaxOp<T>>(g, stream);
      if (op == ReduceOp::Min) return launch_typed<T, T, MinOp<T>>(g, stream);
    }
    throw InternalError(str("internal error, please report: CUDA reduce ", reduce_op_name(op), " of ", dtype_name(x),
                            " into ", dtype_name(out)));
  });
  check_launch("reduce");
}

void launch_argmax(DType t, int64_t* out, const void* x, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned blocks = unsigned(rows < kMaxBlocks ? rows : kMaxBlocks);
  dispatch_compute(t, "argmax", [&](auto v) {
    using T = decltype(v);
    argmax_kernel<T><<<blocks, threads_for(n), 0, stream>>>(out, static_cast<const T*>(x), rows, n);
  });
  check_launch("argmax");
}

}  // namespace nexus::cuda
