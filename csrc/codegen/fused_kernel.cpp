#include "codegen/fused_kernel.h"

#include <sstream>

#include "base/error.h"
#include "base/hash.h"
#include "graph/passes/fuse.h"

namespace nexus::codegen {

const char* access_name(Access a) {
  static const char* names[] = {"contig", "bcast", "strided"};
  return names[int(a)];
}

DType reduce_result_dtype(ReduceOp r, DType in) {
  if (r == ReduceOp::Sum && !is_floating(in)) return DType::Int64;
  if (r == ReduceOp::Mean && !is_floating(in)) return DType::Float32;
  return in;
}

bool FusedKernel::reduces_all() const { return has_reduce() && graph::reduces_every_axis(reduce.axes, ndim); }

bool FusedKernel::reduces_rows() const {
  return has_side_outputs() && !reduces_all() && !std::count(reduce.axes.begin(), reduce.axes.end(), ndim - 1);
}

DType FusedKernel::output_dtype(size_t k) const {
  if (has_reduce() && k == outputs.size()) return reduce.dtype;
  return instrs.at(size_t(outputs.at(k))).dtype;
}

static bool is_compute(DType t) { return !is_half(t); }

void FusedKernel::verify() const {
  NX_ASSERT(!instrs.empty(), "fused kernel with no instructions");
  NX_ASSERT(int(const_dtypes.size()) == num_consts, "const slots ", num_consts);
  auto reg = [&](size_t i, int r, const char* what) {
    NX_ASSERT(r >= 0 && size_t(r) < i, "instruction ", i, " reads ", what, " register ", r, " before it is defined");
    return instrs[size_t(r)].dtype;
  };
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& in = instrs[i];
    switch (in.op) {
      case InstrOp::Load:
        NX_ASSERT(in.a >= 0 && size_t(in.a) < inputs.size(), "instruction ", i, " loads input ", in.a);
        NX_ASSERT(inputs[size_t(in.a)] == in.dtype, "instruction ", i, " loads with the wrong dtype");
        break;
      case InstrOp::Const:
        NX_ASSERT(in.a >= 0 && in.a < num_consts, "instruction ", i, " reads const slot ", in.a);
        break;
      case InstrOp::Unary:
        NX_ASSERT(is_compute(in.dtype) && reg(i, in.a, "a") == in.dtype, "instruction ", i, ": unary ",
                  ops::op_name(in.unary), " on mismatched dtypes");
        NX_ASSERT(in.dtype != DType::Bool, "instruction ", i, ": unary op on bool");
        break;
      case InstrOp::Binary: {
        DType a = reg(i, in.a, "a");
        NX_ASSERT(is_compute(a) && reg(i, in.b, "b") == a, "instruction ", i, ": binary ", ops::op_name(in.binary),
                  " on mismatched dtypes");
        NX_ASSERT(in.dtype == (ops::is_comparison(in.binary) ? DType::Bool : a), "instruction ", i,
                  ": binary result dtype");
        break;
      }
      case InstrOp::Where:
        NX_ASSERT(reg(i, in.a, "cond") == DType::Bool && is_compute(in.dtype) && reg(i, in.b, "b") == in.dtype &&
                      reg(i, in.c, "c") == in.dtype,
                  "instruction ", i, ": where operands");
        break;
      case InstrOp::Cast: reg(i, in.a, "a"); break;
    }
  }
  if (has_reduce()) {
    DType t = reg(instrs.size(), reduce.reg, "reduced");
    NX_ASSERT(outputs.empty() || graph::reduction_with_side_outputs(reduce.kind, t, reduce.axes, ndim),
              "elementwise outputs beside a ", reduce_op_name(reduce.kind),
              " need a floating sum or mean over leading axes, or axes that include the last one");
    for (int r : outputs) reg(instrs.size(), r, "output");
    NX_ASSERT(is_compute(t) && t != DType::Bool, "reduction of a ", dtype_name(t), " register");
    for (size_t k = 0; k < reduce.axes.size(); ++k)
      NX_ASSERT(reduce.axes[k] >= 0 && reduce.axes[k] < ndim && (k == 0 || reduce.axes[k - 1] < reduce.axes[k]),
                "reduction axes must be sorted and within the rank ", ndim);
  } else {
    NX_ASSERT(!outputs.empty(), "a fused kernel with no outputs");
    for (int r : outputs) reg(instrs.size(), r, "output");
  }
}

std::string FusedKernel::structure() const {
  std::ostringstream os;
  os << "in";
  for (DType t : inputs) os << " " << dtype_name(t);
  os << "; consts";
  for (DType t : const_dtypes) os << " " << dtype_name(t);
  os << "; ndim " << ndim << "\n" << dump();
  os << "out";
  for (int r : outputs) os << " r" << r;
  if (has_reduce()) {
    os << " " << reduce_op_name(reduce.kind) << "(r" << reduce.reg << ", axes";
    for (int64_t a : reduce.axes) os << " " << a;
    os << (reduce.keepdims ? ", keepdims" : "") << ") -> " << dtype_name(reduce.dtype);
  }
  return os.str();
}

std::string FusedKernel::dump() const {
  std::ostringstream os;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& in = instrs[i];
    os << "r" << i << ": " << dtype_name(in.dtype) << " = ";
    switch (in.op) {
      case InstrOp::Load: os << "load in" << in.a; break;
      case InstrOp::Const: os << "const c" << in.a; break;
      case InstrOp::Unary: os << ops::op_name(in.unary) << " r" << in.a; break;
      case InstrOp::Binary: os << ops::op_name(in.binary) << " r" << in.a << ", r" << in.b; break;
      case InstrOp::Where: os << "where r" << in.a << ", r" << in.b << ", r" << in.c; break;
      case InstrOp::Cast: os << "cast r" << in.a; break;
    }
    os << "\n";
  }
  return os.str();
}

std::string FusedKernel::name() const {
  std::string n = "nx_fused";
  int shown = 0;
  for (const Instr& in : instrs) {
    if (shown == 5) break;
    if (in.op == InstrOp::Unary) n += "_" + std::string(ops::op_name(in.unary));
    else if (in.op == InstrOp::Binary) n += "_" + std::string(ops::op_name(in.binary));
    else if (in.op == InstrOp::Where) n += "_where";
    else continue;
    ++shown;
  }
  if (has_reduce()) n += "_" + std::string(reduce_op_name(reduce.kind));
  return n + "_" + hash_hex(structure()).substr(0, 8);
}

}  // namespace nexus::codegen
