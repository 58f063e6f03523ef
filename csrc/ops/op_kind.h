// The elementwise op vocabulary of the eager ops, the graph IR and codegen, generated from the
// op table (op_table.h): the enums and what each op accepts and produces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "ops/op_table.h"
#include "tensor/dtype.h"

namespace nexus::ops {

#define NX_OP_ENUM(Enum, fn, name, domain, result, role) Enum,
enum class UnaryOp : uint8_t { NX_UNARY_OPS(NX_OP_ENUM) };
enum class BinaryOp : uint8_t { NX_BINARY_OPS(NX_OP_ENUM) };
#undef NX_OP_ENUM

enum class OpDomain : uint8_t { Any, Numeric, Float };  // op_table.h says what each means
enum class OpResult : uint8_t { Same, Bool };
enum class OpRole : uint8_t { Public, Backward };

struct OpInfo {
  std::string_view name;
  const char* kern_fn;  // the nexus::kern function that computes the op
  OpDomain domain;
  OpResult result;
  OpRole role;
};

#define NX_OP_INFO(Enum, fn, name, domain, result, role) {name, #fn, OpDomain::domain, OpResult::result, OpRole::role},
inline constexpr OpInfo kUnaryOps[] = {NX_UNARY_OPS(NX_OP_INFO)};
inline constexpr OpInfo kBinaryOps[] = {NX_BINARY_OPS(NX_OP_INFO)};
#undef NX_OP_INFO

constexpr const OpInfo& op_info(UnaryOp op) { return kUnaryOps[int(op)]; }
constexpr const OpInfo& op_info(BinaryOp op) { return kBinaryOps[int(op)]; }
// Names also a value past the table (a corrupt op in an error message) instead of reading past it.
constexpr std::string_view op_name(UnaryOp op) { return size_t(op) < std::size(kUnaryOps) ? op_info(op).name : "?"; }
constexpr std::string_view op_name(BinaryOp op) { return size_t(op) < std::size(kBinaryOps) ? op_info(op).name : "?"; }
constexpr bool is_comparison(BinaryOp op) { return op_info(op).result == OpResult::Bool; }
template <class Op> constexpr bool is_backward_only(Op op) { return op_info(op).role == OpRole::Backward; }

// Whether operands of dtype t may reach the op (before Float's integer-to-float32 promotion).
constexpr bool accepts(OpDomain d, DType t) { return d == OpDomain::Any || t != DType::Bool; }
// The dtype an op's operands of dtype t compute in: integers become float32 for a Float op.
constexpr DType operand_dtype(OpDomain d, DType t) {
  return d == OpDomain::Float && !is_floating(t) ? DType::Float32 : t;
}

}  // namespace nexus::ops
