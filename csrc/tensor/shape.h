// Shapes and strides (in elements). Small helpers shared by every op front end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nexus {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// The element count; MemoryError when it does not fit in int64 (a shape no tensor can have).
int64_t numel(const Shape& shape);
// numel(shape) * itemsize in bytes; MemoryError naming `what`, the shape and the bytes when the
// product passes PTRDIFF_MAX (the most one allocation can address). The one size check every
// allocation goes through.
size_t checked_bytes(const Shape& shape, int64_t itemsize, const char* what);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(2, 3)", "(4,)", "()"

// Normalises a possibly negative axis for a tensor of `ndim` dims; IndexError naming the range.
int64_t wrap_axis(int64_t axis, int64_t ndim, const char* op);

// numpy broadcasting of two shapes; ValueError "op: shapes (..) and (..) cannot be broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace nexus
