// The fused-kernel functions both dialects share, written once: the C++ prelude
// (kernel_prelude.h) includes this file and the CUDA prelude embeds its text after defining
// NX_KERN_FN as __device__ __forceinline__. No headers: NVRTC compiles it as it is. What differs
// between host and device (conversions, abs, pow and the transcendentals) stays in each prelude.
#pragma once

#ifndef NX_KERN_FN
#define NX_KERN_FN inline
#endif

namespace nexus {
namespace kern {

// ---- unary (relu keeps NaN; integers never are) ----------------------------------------------
template <class T> NX_KERN_FN T neg(T v) { return T(-v); }
template <class T> NX_KERN_FN T relu(T v) { return v > T(0) ? v : (v != v ? v : T(0)); }
template <class T> NX_KERN_FN T sign(T v) { return T((v > T(0)) - (v < T(0))); }

// ---- binary (bool add/mul are or/and, as in eager) ----------------------------------------
template <class T> NX_KERN_FN T add(T x, T y) { return T(x + y); }
NX_KERN_FN bool add(bool x, bool y) { return x || y; }
template <class T> NX_KERN_FN T mul(T x, T y) { return T(x * y); }
NX_KERN_FN bool mul(bool x, bool y) { return x && y; }
template <class T> NX_KERN_FN T sub(T x, T y) { return T(x - y); }
template <class T> NX_KERN_FN T div(T x, T y) { return x / y; }
template <class T> NX_KERN_FN T maximum(T x, T y) { return (x != x || x > y) ? x : y; }
template <class T> NX_KERN_FN T minimum(T x, T y) { return (x != x || x < y) ? x : y; }
template <class T> NX_KERN_FN bool eq(T x, T y) { return x == y; }
template <class T> NX_KERN_FN bool ne(T x, T y) { return x != y; }
template <class T> NX_KERN_FN bool lt(T x, T y) { return x < y; }
template <class T> NX_KERN_FN bool le(T x, T y) { return x <= y; }
template <class T> NX_KERN_FN bool gt(T x, T y) { return x > y; }
template <class T> NX_KERN_FN bool ge(T x, T y) { return x >= y; }
template <class T> NX_KERN_FN T where(bool c, T x, T y) { return c ? x : y; }
// backward-only (floating T): a gradient g and the forward op's output y
template <class T> NX_KERN_FN T relu_grad(T g, T y) { return y <= T(0) ? T(0) : g; }
template <class T> NX_KERN_FN T tanh_grad(T g, T y) { return g * (T(1) - y * y); }
template <class T> NX_KERN_FN T sigmoid_grad(T g, T y) { return g * (y * (T(1) - y)); }

// ---- reductions: max/min with numpy's NaN propagation ---------------------------------------
template <class T> NX_KERN_FN T pick_max(T acc, T v) { return (v != v || v > acc) ? v : acc; }
template <class T> NX_KERN_FN T pick_min(T acc, T v) { return (v != v || v < acc) ? v : acc; }

}  // namespace kern
}  // namespace nexus
