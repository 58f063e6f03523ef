#include "codegen/render.h"

#include <sstream>

#include "base/error.h"
#include "base/hash.h"

namespace nexus::codegen {

extern const char kHalfText[];
extern const char kVecMathText[];
extern const char kPreludeText[];
extern const char kOpsText[];
extern const char kCudaPreludeText[];

namespace {

// The CUDA dialect's prelude: the integer types NVRTC lacks (nvcc users get them from <cstdint>),
// then kernel_ops.h and kernel_prelude_cuda.h (the device functions, shared with the CUDA
// backend's own kernels in cuda/kernels/), both as text.
constexpr const char* kCudaTypes = R"nxsrc(
typedef long long int64_t;
typedef int int32_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
#define NX_KERN_FN __device__ __forceinline__
)nxsrc";

// ---- dialects: what differs between C++ and CUDA C --------------------------------------
struct DialectRow {
  const char* entry;      // qualifiers of the entry point
  const char* restrict_;  // pointer qualifier
  const char* loop;       // the loop header over i in [0, n)
};
// C++: GCC does not take __restrict on the kernel's local pointers as proof that they do not
// alias, so it versions the loop with a run-time overlap check per pair of operands, and past 10
// checks (a kernel of 3 inputs and 3 outputs has 12) it leaves the loop scalar: a fused chain
// with a few outputs ran 10x slower than with one. ivdep says what the kernel guarantees anyway:
// element i reads its operands at i (or at a broadcast index) and writes its outputs at i, so no
// iteration depends on another through memory.
constexpr DialectRow kDialects[] = {
    {"extern \"C\" __attribute__((visibility(\"default\"))) void", "__restrict",
     "_Pragma(\"GCC ivdep\") for (int64_t i = 0; i < n; ++i)"},
    {"extern \"C\" __global__ void", "__restrict__",
     "for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
     "i += (int64_t)gridDim.x * blockDim.x)"},
};

// The C++ type of a register holding `t` (halves are floats) and of its storage in memory.
const char* reg_type(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: return "float";
    case DType::Float64: return "double";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::Bool: return "bool";
  }
  return "?";
}
const char* storage_type(DType t) { return is_half(t) ? "uint16_t" : reg_type(t); }

std::string load_expr(DType t, const std::string& elem, Dialect d) {
  if (t == DType::Float16) return (d == Dialect::Cpp ? "nexus::fp16_to_float(" : "h2f(") + elem + ")";
  if (t == DType::BFloat16) return (d == Dialect::Cpp ? "nexus::bf16_to_float(" : "b2f(") + elem + ")";
  return elem;
}
std::string store_expr(DType t, const std::string& v, Dialect d) {
  if (t == DType::Float16) return (d == Dialect::Cpp ? "nexus::float_to_fp16(" : "f2h(") + v + ")";
  if (t == DType::BFloat16) return (d == Dialect::Cpp ? "nexus::float_to_bf16(" : "f2b(") + v + ")";
  return v;
}
// A value of register dtype `from` as register dtype `to` (halves round).
std::string cast_expr(DType from, DType to, const std::string& v) {
  std::string c = std::string("cvt<") + reg_type(to) + ">(" + v + ")";
  if (to == DType::Float16) return "round_f16(" + c + ")";
  if (to == DType::BFloat16) return "round_bf16(" + c + ")";
  return c;
}

std::string r(int i) { return "r" + std::to_string(i); }

// The instruction's expression, given its operands' registers (Const/Load handled by callers).
std::string instr_expr(const FusedKernel& k, const Instr& in) {
  switch (in.op) {
    case InstrOp::Unary: return std::string(ops::op_info(in.unary).kern_fn) + "(" + r(in.a) + ")";
    case InstrOp::Binary: return std::string(ops::op_info(in.binary).kern_fn) + "(" + r(in.a) + ", " + r(in.b) + ")";
    case InstrOp::Where: return "where(" + r(in.a) + ", " + r(in.b) + ", " + r(in.c) + ")";
    case InstrOp::Cast: return cast_expr(k.instrs[size_t(in.a)].dtype, in.dtype, r(in.a));
    default: break;
  }
  NX_ASSERT(false, "instr_expr on a load or const");
  return "";
}

// The headers' own #include lines of project files are dropped: their text is inlined instead.
void append_header(std::string& out, const char* text) {
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);)
    if (line.rfind("#include \"", 0) != 0 && line.rfind("#pragma once", 0) != 0) out += line + "\n";
}

std::string prelude(Dialect d) {
  std::string out;
  if (d == Dialect::Cuda) {
    out = kCudaTypes;
    append_header(out, kOpsText);
    append_header(out, kCudaPreludeText);
    return out;
  }
  out = "#include <bit>\n#include <cmath>\n#include <cstdint>\n#include <limits>\n#include <type_traits>\n";
  for (const char* text : {kHalfText, kVecMathText, kOpsText, kPreludeText}) append_header(out, text);
  return out;
}

// What one render emits into, and for which kernel.
struct Out {
  std::ostringstream& os;
  const FusedKernel& k;
  const std::vector<Access>& access;
  Dialect d;
  const DialectRow& dr;
  const std::string& name;
  bool by_value = false;  // CUDA elementwise: NxArgs by value, rows located by outer dims (render.h)
};

void header_comment(const Out& o, const std::string& key) {
  std::ostringstream& os = o.os;
  const FusedKernel& k = o.k;
  os << "// " << o.name << ": generated by nexus codegen, do not edit.\n// inputs:";
  for (size_t i = 0; i < k.inputs.size(); ++i) os << " " << dtype_name(k.inputs[i]) << "/" << access_name(o.access[i]);
  os << "\n// key: " << key << "\n";
  std::istringstream is(k.dump());
  for (std::string line; std::getline(is, line);) os << "//   " << line << "\n";
}

// A load of a broadcast input (the same element all along the call's loop) in the C++ forms:
// emit_setup reads it once (GCC does not hoist it past the stores, __restrict or not).
bool hoisted(const Out& o, const Instr& in) {
  return in.op == InstrOp::Load && !o.by_value && o.access[size_t(in.a)] == Access::Bcast;
}

// Declarations of inputs, outputs and hoisted constants and loads; then the per-element body lines.
void emit_setup(const Out& o, bool outputs) {
  std::ostringstream& os = o.os;
  const FusedKernel& k = o.k;
  const char* rq = o.dr.restrict_;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    os << "  const " << storage_type(k.inputs[i]) << "* " << rq << " in" << i << " = (const "
       << storage_type(k.inputs[i]) << "*)p[" << i << "];\n";
    if (o.access[i] == Access::Strided) os << "  const int64_t s" << i << " = s[" << i << "];\n";
  }
  if (outputs)
    for (size_t j = 0; j < k.outputs.size(); ++j) {
      const char* st = storage_type(k.output_dtype(j));
      os << "  " << st << "* " << rq << " out" << j << " = (" << st << "*)p[" << k.inputs.size() + j << "];\n";
    }
  for (size_t i = 0; i < k.instrs.size(); ++i) {
    const Instr& in = k.instrs[i];
    if (in.op == InstrOp::Const)
      os << "  const " << reg_type(in.dtype) << " " << r(int(i)) << " = "
         << cast_expr(DType::Float64, in.dtype, "c[" + std::to_string(in.a) + "]") << ";\n";
    else if (hoisted(o, in))  // one value for the whole call: read once, before the loop
      os << "  const " << reg_type(in.dtype) << " " << r(int(i)) << " = "
         << load_expr(in.dtype, "in" + std::to_string(in.a) + "[0]", o.d) << ";\n";
  }
}

void emit_body(const Out& o, const std::string& idx, const char* indent) {
  const FusedKernel& k = o.k;
  for (size_t i = 0; i < k.instrs.size(); ++i) {
    const Instr& in = k.instrs[i];
    if (in.op == InstrOp::Const || hoisted(o, in)) continue;
    std::string e;
    if (in.op == InstrOp::Load) {
      const std::string a = "in" + std::to_string(in.a);
      Access acc = o.access[size_t(in.a)];
      // By value, each input's row starts at its offset o<k> (0 in the other forms).
      const std::string row = o.by_value ? str("o", in.a) : "";
      const std::string plus = o.by_value ? row + " + " : "";
      std::string elem = acc == Access::Contig  ? a + "[" + plus + idx + "]"
                         : acc == Access::Bcast ? a + "[" + (o.by_value ? row : "0") + "]"
                                                : a + "[" + plus + "(" + idx + ") * s" + std::to_string(in.a) + "]";
      e = load_expr(in.dtype, elem, o.d);
    } else {
      e = instr_expr(k, in);
    }
    o.os << indent << "const " << reg_type(in.dtype) << " " << r(int(i)) << " = " << e << ";\n";
  }
}

// The elementwise outputs' stores at element `idx`.
void emit_stores(const Out& o, const char* idx = "i") {
  for (size_t j = 0; j < o.k.outputs.size(); ++j)
    o.os << "    out" << j << "[" << idx << "] = " << store_expr(o.k.output_dtype(j), r(o.k.outputs[j]), o.d) << ";\n";
}

// The comment naming the kernel, the prelude, and (C++) the key symbol the loader checks.
void emit_preamble(const Out& o, const std::string& key) {
  header_comment(o, key);
  o.os << prelude(o.d) << "\n";
  if (o.d == Dialect::Cpp)
    o.os << "extern \"C\" __attribute__((visibility(\"default\"))) const char nx_key[] = \"" << key << "\";\n\n";
}

// The entry point's first lines: the shared parameters, then `extra` ones (render.h).
void emit_signature(const Out& o, const char* extra) {
  o.os << o.dr.entry << " " << o.name << "(char* const* p, const int64_t* s, int64_t n, const double* c" << extra
       << ") {\n  using namespace nexus::kern;\n";
}

// CUDA: the by-value arguments (render.h's CudaArgs, member for member).
std::string cuda_args_text() {
  const std::string k = std::to_string(kMaxKernelArgs), d = std::to_string(kMaxKernelDims);
  return "struct NxArgs {\n  char* p[" + k + "];\n  int64_t s[" + k + "];\n  double c[" + k +
         "];\n  int64_t inner, nd;\n  int64_t shape[" + d + "];\n  int64_t st[" + k + "][" + d + "];\n};\n";
}

// CUDA, launched by a device: one thread per linear index t of the whole iteration shape; the
// row of t (its outer dims) gives each input's offset o<k>, the column is i (as in the C++ form).
void emit_elementwise_by_value(const Out& o) {
  std::ostringstream& os = o.os;
  const size_t nin = o.k.inputs.size();
  os << cuda_args_text() << "\n"
     << o.dr.entry << " " << o.name << "(NxArgs a, int64_t n) {\n  using namespace nexus::kern;\n"
     << "  char* const* p = a.p;\n  const int64_t* s = a.s;\n  const double* c = a.c;\n";
  emit_setup(o, true);
  os << "  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; "
        "t += (int64_t)gridDim.x * blockDim.x) {\n    int64_t i = t;\n";
  for (size_t k = 0; k < nin; ++k) os << "    int64_t o" << k << " = 0;\n";
  os << "    if (a.nd > 0) {\n      int64_t row = t / a.inner;\n      i = t - row * a.inner;\n"
     << "#pragma unroll\n      for (int d = 0; d < " << kMaxKernelDims << "; ++d) {\n"
     << "        if (d >= a.nd) break;\n        const int64_t x = row % a.shape[d];\n        row /= a.shape[d];\n";
  for (size_t k = 0; k < nin; ++k) os << "        o" << k << " += x * a.st[" << k << "][d];\n";
  os << "      }\n    }\n";
  emit_body(o, "i", "    ");
  emit_stores(o, "t");
  os << "  }\n}\n";
}

void emit_elementwise(const Out& o) {
  if (o.by_value) return emit_elementwise_by_value(o);
  emit_signature(o, "");
  emit_setup(o, true);
  o.os << "  " << o.dr.loop << " {\n";
  emit_body(o, "i", "    ");
  emit_stores(o);
  o.os << "  }\n}\n";
}

// One row of a sum over leading axes: store the side outputs, add the row into acc.
void emit_reduce_rows(const Out& o) {
  const char* rt = reg_type(o.k.instrs[size_t(o.k.reduce.reg)].dtype);
  emit_signature(o, ", void* acc, int64_t first");
  emit_setup(o, true);
  o.os << "  " << rt << "* " << o.dr.restrict_ << " a = (" << rt << "*)acc;\n"
       << "  auto value = [&](int64_t i) -> " << rt << " {\n";
  emit_body(o, "i", "    ");
  emit_stores(o);
  o.os << "    return " << r(o.k.reduce.reg) << ";\n  };\n"
       << "  if (first) " << o.dr.loop << " a[i] = value(i);\n"
       << "  else " << o.dr.loop << " a[i] = (" << rt << ")(a[i] + value(i));\n}\n";
}

// CUDA: one partial per thread over a grid-stride loop, combined with atomics into acc.
void emit_reduce_epilogue_cuda(const Out& o, bool sum) {
  const FusedKernel& k = o.k;
  std::ostringstream& os = o.os;
  const DialectRow& dr = o.dr;
  const bool fl = is_floating(k.instrs[size_t(k.reduce.reg)].dtype);
  const char* acc_t = fl ? "double" : "int64_t";
  os << "  " << acc_t << " part = " << (sum ? "0" : "value(0)") << ";\n  " << dr.loop << " part = "
     << (sum ? "part + (" + std::string(acc_t) + ")value(i)"
             : std::string(k.reduce.kind == ReduceOp::Max ? "pick_max" : "pick_min") + "(part, (" + acc_t +
                   ")value(i))")
     << ";\n";
  if (sum)
    os << "  atomicAdd((" << (fl ? "double" : "unsigned long long") << "*)acc, ("
       << (fl ? "double" : "unsigned long long") << ")part);\n";
  else
    os << "  { unsigned long long* a = (unsigned long long*)acc; unsigned long long old = *a, seen;\n"
       << "    do { seen = old; " << acc_t << " cur = *(" << acc_t << "*)&seen; " << acc_t
       << " nv = " << (k.reduce.kind == ReduceOp::Max ? "pick_max" : "pick_min") << "(cur, part);\n"
       << "      old = atomicCAS(a, seen, *(unsigned long long*)&nv); } while (old != seen); }\n";
  os << "}\n";
}

// C++: lanes over whole blocks of kLanes (float sums in double lanes), then the lanes in order,
// then the tail (the interpreter's order, so both give the same bits).
void emit_reduce_epilogue_cpp(const Out& o, bool sum) {
  const FusedKernel& k = o.k;
  std::ostringstream& os = o.os;
  const DType t = k.instrs[size_t(k.reduce.reg)].dtype;
  const bool fl = is_floating(t);
  const char* rt = reg_type(t);
  const char* acc_t = fl ? "double" : "int64_t";
  if (sum && fl) {
    // A tile's values first (a loop GCC vectorizes as an elementwise kernel's), then widened
    // into the lanes: one loop doing both stays scalar and branchy where a value holds a select
    // (relu_grad), with GCC 12.
    os << "  double lanes[kLanes] = {};\n  const int64_t full = n / kLanes * kLanes;\n"
       << "  " << rt << " tile[kSumTile];\n"
       << "  for (int64_t i0 = 0; i0 < full; i0 += kSumTile) {\n"
       << "    const int64_t m = full - i0 < kSumTile ? full - i0 : kSumTile;\n"
       << "    _Pragma(\"GCC ivdep\") for (int64_t j = 0; j < m; ++j) tile[j] = value(i0 + j);\n"
       << "    for (int64_t b = 0; b < m; b += kLanes)\n"
       << "      for (int64_t j = 0; j < kLanes; ++j) lanes[j] += double(tile[b + j]);\n  }\n"
       << "  double total = 0;\n  for (int64_t j = 0; j < kLanes; ++j) total += lanes[j];\n"
       << "  for (int64_t i = full; i < n; ++i) total += value(i);\n  *(double*)acc = total;\n}\n";
  } else if (sum) {
    os << "  int64_t total = 0;\n  for (int64_t i = 0; i < n; ++i) total += cvt<int64_t>(value(i));\n"
       << "  *(int64_t*)acc = total;\n}\n";
  } else {
    const char* pick = k.reduce.kind == ReduceOp::Max ? "pick_max" : "pick_min";
    os << "  " << rt << " lanes[kLanes];\n  const " << rt << " first = value(0);\n"
       << "  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = first;\n  int64_t i = 0;\n"
       << "  for (; i + kLanes <= n; i += kLanes)\n"
       << "    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = " << pick << "(lanes[j], value(i + j));\n"
       << "  " << rt << " best = lanes[0];\n  for (int64_t j = 1; j < kLanes; ++j) best = " << pick
       << "(best, lanes[j]);\n"
       << "  for (; i < n; ++i) best = " << pick << "(best, value(i));\n"
       << "  *(" << acc_t << "*)acc = (" << acc_t << ")best;\n}\n";
  }
}

// Reduction: the value at index j is a lambda the compiler inlines into the epilogue's loop (a
// full reduction with side outputs stores them there: every j is visited once).
void emit_reduction(const Out& o) {
  const char* rt = reg_type(o.k.instrs[size_t(o.k.reduce.reg)].dtype);
  emit_signature(o, ", void* acc");
  emit_setup(o, true);
  o.os << "  auto value = [&](int64_t j) -> " << rt << " {\n";
  emit_body(o, "j", "    ");
  emit_stores(o, "j");
  o.os << "    return " << r(o.k.reduce.reg) << ";\n  };\n";
  const bool sum = o.k.reduce.kind == ReduceOp::Sum || o.k.reduce.kind == ReduceOp::Mean;
  if (o.d == Dialect::Cuda) emit_reduce_epilogue_cuda(o, sum);
  else emit_reduce_epilogue_cpp(o, sum);
}

}  // namespace

const std::string& cuda_args_fingerprint() {
  static const std::string fp = Hasher().add(cuda_args_text()).add("by value v1").hex();
  return fp;
}

const std::string& cpp_prelude() {
  static const std::string text = prelude(Dialect::Cpp);
  return text;
}

const std::string& renderer_fingerprint() {
  static const std::string fp = Hasher()
                                    .add(prelude(Dialect::Cpp))
                                    .add(prelude(Dialect::Cuda))
                                    .add("render v4 (float sums in double lanes, values by block)")
                                    .hex();
  return fp;
}

Source render(const FusedKernel& k, const std::vector<Access>& access, Dialect d, const std::string& key) {
  k.verify();
  NX_ASSERT(access.size() == k.inputs.size(), "one access class per input");
  std::ostringstream os;
  const std::string name = k.name();
  const Out o{os, k, access, d, kDialects[int(d)], name, d == Dialect::Cuda && !k.has_reduce()};
  emit_preamble(o, key);
  if (!k.has_reduce()) emit_elementwise(o);
  else if (k.reduces_rows()) emit_reduce_rows(o);
  else emit_reduction(o);
  return {name, os.str()};
}

}  // namespace nexus::codegen
