#include "base/reduce_op.h"

#include <algorithm>
#include <sstream>

#include "base/error.h"

namespace nexus {

std::string_view reduce_op_name(ReduceOp op) {
  static constexpr std::string_view names[] = {"none", "sum", "mean", "max", "min"};
  return names[size_t(op)];
}

[[noreturn]] static void throw_not_one_of(std::string_view name, std::string_view what, ReduceOps valid) {
  std::ostringstream os;
  os << what << " '" << name << "' is not one of ";
  for (size_t i = 0; i < valid.size(); ++i) os << (i ? ", '" : "'") << reduce_op_name(valid[i]) << "'";
  throw ValueError(os.str());
}

ReduceOp parse_reduce_op(std::string_view name, std::string_view what, ReduceOps valid) {
  for (ReduceOp op : valid)
    if (reduce_op_name(op) == name) return op;
  throw_not_one_of(name, what, valid);
}

void check_reduce_op(ReduceOp op, std::string_view what, ReduceOps valid) {
  if (std::find(valid.begin(), valid.end(), op) == valid.end()) throw_not_one_of(reduce_op_name(op), what, valid);
}

}  // namespace nexus
