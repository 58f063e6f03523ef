// ReduceOp: the one reduction vocabulary of Nexus, from the graph IR to Python. The same value
// names the graph's Reduce nodes and the eager reductions (over axes), a fused kernel's epilogue,
// a loss's reduction and the ring all-reduce (over ranks). None is "no reduction" in both places
// that have one: a fused kernel without an epilogue (elementwise), and a loss kept per sample
// (torch's reduction='none'). Each consumer states which ops it takes and checks them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace nexus {

enum class ReduceOp : uint8_t { None, Sum, Mean, Max, Min };
using ReduceOps = std::span<const ReduceOp>;

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::None, ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max,
                                             ReduceOp::Min};
// The ops that combine values (a Reduce node, an eager reduction, an all-reduce): all but None.
inline constexpr ReduceOp kReductions[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};

// Max and Min keep one of the values (a NaN wins, as numpy.maximum) instead of adding them up.
constexpr bool is_extremum(ReduceOp op) { return op == ReduceOp::Max || op == ReduceOp::Min; }

std::string_view reduce_op_name(ReduceOp op);  // "none", "sum", "mean", "max", "min"
// The op called `name`, if it is one of `valid`; else a ValueError "<what> 'x' is not one of
// 'a', 'b', ..." (`what` names the argument: "all_reduce: op").
ReduceOp parse_reduce_op(std::string_view name, std::string_view what, ReduceOps valid);
// The same ValueError unless `op` is one of `valid`.
void check_reduce_op(ReduceOp op, std::string_view what, ReduceOps valid);

}  // namespace nexus
