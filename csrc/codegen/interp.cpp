#include "codegen/interp.h"

#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "codegen/kernel_dispatch.h"

namespace nexus::codegen {
namespace NX_CPU_VARIANT {
namespace {

using namespace nexus::kern;

// Calls fn(T{}) with T the register type of dtype t (halves are floats).
template <class Fn> void with_reg_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Int32: return fn(int32_t{});
    case DType::Int64: return fn(int64_t{});
    case DType::Bool: return fn(bool{});
  }
}

template <class T> void load(T* o, const char* base, DType t, Access a, int64_t s, int64_t i0, int64_t m) {
  auto elem = [&](int64_t i) -> T {
    const int64_t idx = a == Access::Contig ? i0 + i : a == Access::Bcast ? 0 : (i0 + i) * s;
    if (t == DType::Float16) return T(fp16_to_float(reinterpret_cast<const uint16_t*>(base)[idx]));
    if (t == DType::BFloat16) return T(bf16_to_float(reinterpret_cast<const uint16_t*>(base)[idx]));
    return reinterpret_cast<const T*>(base)[idx];
  };
  if (a == Access::Contig && !is_half(t)) {
    std::memcpy(o, reinterpret_cast<const T*>(base) + i0, size_t(m) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < m; ++i) o[i] = elem(i);
}

// The op's kern:: function over a tile (kernel_dispatch.h: the eager kernels call the same).
template <class T> void unary(ops::UnaryOp op, T* o, const T* a, int64_t m) {
  with_unary<T>(op, [&](auto f) {
    for (int64_t i = 0; i < m; ++i) o[i] = f(a[i]);
  });
}

// `out` holds T, or bool for a comparison.
template <class T> void binary(ops::BinaryOp op, void* out, const T* a, const T* b, int64_t m) {
  with_binary<T>(op, [&](auto f) {
    auto* o = static_cast<decltype(f(T{}, T{}))*>(out);
    for (int64_t i = 0; i < m; ++i) o[i] = f(a[i], b[i]);
  });
}

template <class U, class T> void cast(U* o, const T* a, DType to, int64_t m) {
  for (int64_t i = 0; i < m; ++i) o[i] = cvt<U>(a[i]);
  if constexpr (std::is_same_v<U, float>) {
    if (to == DType::Float16)
      for (int64_t i = 0; i < m; ++i) o[i] = round_f16(o[i]);
    if (to == DType::BFloat16)
      for (int64_t i = 0; i < m; ++i) o[i] = round_bf16(o[i]);
  }
}

template <class T> void store(char* base, DType t, const T* v, int64_t i0, int64_t m) {
  if (t == DType::Float16) {
    auto* o = reinterpret_cast<uint16_t*>(base) + i0;
    for (int64_t i = 0; i < m; ++i) o[i] = float_to_fp16(float(v[i]));
  } else if (t == DType::BFloat16) {
    auto* o = reinterpret_cast<uint16_t*>(base) + i0;
    for (int64_t i = 0; i < m; ++i) o[i] = float_to_bf16(float(v[i]));
  } else {
    std::memcpy(reinterpret_cast<T*>(base) + i0, v, size_t(m) * sizeof(T));
  }
}

// Registers for one tile: kTile slots of 8 bytes each, per instruction; one arena per thread.
struct Regs {
  std::vector<uint64_t> arena;
  void* at(size_t r) { return arena.data() + r * kTile; }
};

Regs& regs_for(const FusedKernel& k) {
  thread_local Regs regs;
  if (regs.arena.size() < k.instrs.size() * kTile) regs.arena.resize(k.instrs.size() * kTile);
  return regs;
}

// Evaluates every instruction on elements [i0, i0 + m) of the range.
void eval_tile(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s,
               const double* c, int64_t i0, int64_t m, Regs& R) {
  for (size_t i = 0; i < k.instrs.size(); ++i) {
    const Instr& in = k.instrs[i];
    with_reg_type(in.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* o = static_cast<T*>(R.at(i));
      switch (in.op) {
        case InstrOp::Load: load(o, p[in.a], in.dtype, access[size_t(in.a)], s[in.a], i0, m); break;
        case InstrOp::Const: {
          T v = T{};
          cast(&v, &c[in.a], in.dtype, 1);
          for (int64_t j = 0; j < m; ++j) o[j] = v;
          break;
        }
        case InstrOp::Unary: unary(in.unary, o, static_cast<const T*>(R.at(size_t(in.a))), m); break;
        case InstrOp::Binary:
          with_reg_type(k.instrs[size_t(in.a)].dtype, [&](auto atag) {
            using A = decltype(atag);
            binary(in.binary, R.at(i), static_cast<const A*>(R.at(size_t(in.a))),
                   static_cast<const A*>(R.at(size_t(in.b))), m);
          });
          break;
        case InstrOp::Where: {
          const bool* cond = static_cast<const bool*>(R.at(size_t(in.a)));
          const T* x = static_cast<const T*>(R.at(size_t(in.b)));
          const T* y = static_cast<const T*>(R.at(size_t(in.c)));
          for (int64_t j = 0; j < m; ++j) o[j] = where(cond[j], x[j], y[j]);
          break;
        }
        case InstrOp::Cast:
          with_reg_type(k.instrs[size_t(in.a)].dtype, [&](auto atag) {
            using A = decltype(atag);
            cast(o, static_cast<const A*>(R.at(size_t(in.a))), in.dtype, m);
          });
          break;
      }
    });
  }
}

// Stores the tile's elementwise outputs (after the inputs in p).
void store_outputs(const FusedKernel& k, char* const* p, int64_t i0, int64_t m, Regs& R) {
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    const DType t = k.output_dtype(o);
    with_reg_type(t, [&](auto tag) {
      using T = decltype(tag);
      store(p[k.inputs.size() + o], t, static_cast<const T*>(R.at(size_t(k.outputs[o]))), i0, m);
    });
  }
}

}  // namespace

static void interp_elementwise(const FusedKernel& k, const std::vector<Access>& access, char* const* p,
                               const int64_t* s, int64_t n, const double* c) {
  Regs& R = regs_for(k);
  for (int64_t i0 = 0; i0 < n; i0 += kTile) {
    const int64_t m = std::min(kTile, n - i0);
    eval_tile(k, access, p, s, c, i0, m, R);
    store_outputs(k, p, i0, m, R);
  }
}

static void interp_reduce_row(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s,
                              int64_t n, const double* c, void* acc, bool first) {
  Regs& R = regs_for(k);
  const DType t = k.instrs[size_t(k.reduce.reg)].dtype;
  for (int64_t i0 = 0; i0 < n; i0 += kTile) {
    const int64_t m = std::min(kTile, n - i0);
    eval_tile(k, access, p, s, c, i0, m, R);
    store_outputs(k, p, i0, m, R);
    with_reg_type(t, [&](auto tag) {
      using T = decltype(tag);
      const T* v = static_cast<const T*>(R.at(size_t(k.reduce.reg)));
      T* a = static_cast<T*>(acc) + i0;
      if (first)
        for (int64_t j = 0; j < m; ++j) a[j] = v[j];
      else
        for (int64_t j = 0; j < m; ++j) a[j] = T(a[j] + v[j]);
    });
  }
}

static void interp_reduce(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s,
                          int64_t n, const double* c, void* acc) {
  NX_ASSERT(n > 0, "empty reduction range");
  Regs& R = regs_for(k);
  const DType t = k.instrs[size_t(k.reduce.reg)].dtype;
  const bool sum = k.reduce.kind == ReduceOp::Sum || k.reduce.kind == ReduceOp::Mean;
  const bool is_max = k.reduce.kind == ReduceOp::Max;
  with_reg_type(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      NX_ASSERT(false, "reduction of a bool register");
    } else {
      // The same order as the rendered code: lanes over whole blocks of kLanes, then the lanes
      // in order, then the tail (kTile is a multiple of kLanes, so blocks never straddle tiles).
      using Lane = std::conditional_t<std::is_floating_point_v<T>, double, T>;  // float sums: double lanes
      Lane lanes[kLanes];
      int64_t itotal = 0;
      const int64_t full = n / kLanes * kLanes;
      T tail[kLanes];
      int64_t ntail = 0;
      for (int64_t i0 = 0; i0 < n; i0 += kTile) {
        const int64_t m = std::min(kTile, n - i0);
        eval_tile(k, access, p, s, c, i0, m, R);
        store_outputs(k, p, i0, m, R);  // a full reduction's side outputs (none otherwise)
        const T* v = static_cast<const T*>(R.at(size_t(k.reduce.reg)));
        if (i0 == 0)
          for (int64_t j = 0; j < kLanes; ++j) lanes[j] = sum ? Lane(0) : Lane(v[0]);
        if (sum && std::is_integral_v<T>) {
          for (int64_t j = 0; j < m; ++j) itotal += int64_t(v[j]);
          continue;
        }
        const int64_t mfull = std::min(m, full - i0);
        for (int64_t b = 0; b + kLanes <= mfull; b += kLanes)
          for (int64_t j = 0; j < kLanes; ++j)
            lanes[j] = sum      ? Lane(lanes[j] + Lane(v[b + j]))
                       : is_max ? Lane(pick_max(T(lanes[j]), v[b + j]))
                                : Lane(pick_min(T(lanes[j]), v[b + j]));
        for (int64_t j = std::max<int64_t>(mfull, 0); j < m; ++j) tail[ntail++] = v[j];
      }
      if constexpr (std::is_integral_v<T>) {
        if (sum) {
          *static_cast<int64_t*>(acc) = itotal;
          return;
        }
      }
      if (sum) {
        double total = 0;
        for (int64_t j = 0; j < kLanes; ++j) total += lanes[j];
        for (int64_t j = 0; j < ntail; ++j) total += tail[j];
        *static_cast<double*>(acc) = total;
      } else {
        T best = T(lanes[0]);
        for (int64_t j = 1; j < kLanes; ++j) best = is_max ? pick_max(best, T(lanes[j])) : pick_min(best, T(lanes[j]));
        for (int64_t j = 0; j < ntail; ++j) best = is_max ? pick_max(best, tail[j]) : pick_min(best, tail[j]);
        if constexpr (std::is_floating_point_v<T>) *static_cast<double*>(acc) = double(best);
        else *static_cast<int64_t*>(acc) = int64_t(best);
      }
    }
  });
}

}  // namespace NX_CPU_VARIANT

const Interp& interp_for(VariantTag<CpuVariant::NX_CPU_VARIANT>) {
  static const Interp table{NX_CPU_VARIANT::interp_elementwise, NX_CPU_VARIANT::interp_reduce,
                            NX_CPU_VARIANT::interp_reduce_row};
  return table;
}

}  // namespace nexus::codegen
