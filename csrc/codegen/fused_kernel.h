// The fused program IR (FusedKernel): what one generated kernel computes, element by element.
//
// Registers are produced in order by instructions: Load (input k), Const (runtime constant slot
// k), Unary, Binary, Where, Cast. Each register has a dtype; arithmetic runs on compute dtypes
// (float32, float64, int32, int64, bool) and float16/bfloat16 registers hold float32 values
// rounded to that type (a Cast to float16 rounds), which is exactly what the eager ops do between
// two ops. Outputs name registers. An optional reduction epilogue reduces one register over the
// given axes of the iteration shape (sum, mean, max, min) into the last output. A reduction
// kernel stores other registers elementwise only when it is a floating sum or mean over leading
// axes (has_side_outputs: it then runs row by row, the layout of a bias gradient) or over every
// axis (reduces_all: chunk by chunk, as without them).
//
// The iteration shape is the broadcast of the inputs' shapes at run time, so one FusedKernel
// serves every shape. How each input is walked along the innermost dimension (its Access:
// contiguous, broadcast or strided) specialises the generated code and is part of the key.
#pragma once

#include <string>
#include <vector>

#include "base/reduce_op.h"
#include "ops/op_kind.h"
#include "tensor/dtype.h"

namespace nexus::codegen {

enum class InstrOp : uint8_t { Load, Const, Unary, Binary, Where, Cast };
enum class Access : uint8_t { Contig, Bcast, Strided };  // an input's innermost-dimension walk

const char* access_name(Access a);

struct Instr {
  InstrOp op;
  DType dtype;                 // the result's dtype
  int a = -1, b = -1, c = -1;  // operand registers; Load: a = input index; Const: a = const slot
  ops::UnaryOp unary = ops::UnaryOp::Neg;
  ops::BinaryOp binary = ops::BinaryOp::Add;
};

struct Reduction {
  ReduceOp kind = ReduceOp::None;  // None: no reduction; else one of kReductions
  std::vector<int64_t> axes;       // of the iteration shape, sorted, non-negative; empty = all
  bool keepdims = false;
  int reg = -1;                  // the register reduced (a compute dtype)
  DType dtype = DType::Float32;  // the result's dtype (as the eager reduction's)
};

struct FusedKernel {
  std::vector<DType> inputs;  // storage dtypes of the inputs, in order
  int num_consts = 0;         // runtime constant slots (values are passed per launch)
  std::vector<DType> const_dtypes;
  std::vector<Instr> instrs;
  std::vector<int> outputs;  // registers stored at every element (then the reduction, if any)
  Reduction reduce;          // kind None: an elementwise kernel
  int ndim = 0;              // rank of the iteration shape (reductions: axes refer to it)

  bool has_reduce() const { return reduce.kind != ReduceOp::None; }
  DType output_dtype(size_t k) const;
  bool has_side_outputs() const { return has_reduce() && !outputs.empty(); }
  bool reduces_all() const;  // a reduction over every axis
  // A reduction with side outputs over leading axes only (a bias gradient): it runs row by row,
  // accumulating a row of kept values per reduced row (Program::run_rows). Any other reduction
  // (side outputs or not) runs chunk by chunk along its innermost reduced axis.
  bool reduces_rows() const;
  size_t num_outputs() const { return outputs.size() + (has_reduce() ? 1 : 0); }

  // Checks that registers are defined before use, dtypes are consistent and arithmetic runs on
  // compute dtypes; throws InternalError naming the instruction.
  void verify() const;
  // Canonical text of the structure (no constant values): the basis of the cache key.
  std::string structure() const;
  // nx_fused_<first ops>_<8 hex digits of the structure hash>.
  std::string name() const;
  // One line per instruction, for explain() and errors.
  std::string dump() const;
};

// The dtype a reduction produces from a register of dtype `in` (as ops::reduce / ops::mean).
DType reduce_result_dtype(ReduceOp r, DType in);

}  // namespace nexus::codegen
