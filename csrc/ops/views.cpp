// View ops share storage (reshape copies only when the layout cannot be viewed), plus the ops
// that assemble or pick along an axis: index_select, concat, stack.
#include <algorithm>
#include <cstring>

#include "base/checked.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/loops.h"
#include "ops/derivatives.h"
#include "ops/dispatch.h"
#include "ops/internal.h"

namespace nexus::ops {

static Tensor make_view(const Tensor& x, int64_t offset, Shape shape, Strides strides) {
  return Tensor::view_of(x.storage(), offset, std::move(shape), std::move(strides), x.dtype());
}

// Strides for viewing x with `shape`, if the existing layout allows it (as torch's computeStride).
static bool view_strides(const Tensor& x, const Shape& shape, Strides& out) {
  if (x.is_contiguous() || x.numel() == 0) {
    out = contiguous_strides(shape);
    return true;
  }
  const Shape& old = x.shape();
  const Strides& os = x.strides();
  out.assign(shape.size(), 0);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk = os.empty() ? 1 : os.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old.size()) - 1; d >= 0; --d) {
    tensor_numel *= old[d];
    if (d == 0 || (old[d - 1] != 1 && os[d - 1] != tensor_numel * chunk)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk = os[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor reshape(const Tensor& x, Shape shape) {
  int64_t known = 1, infer = -1;
  const bool empty = std::count(shape.begin(), shape.end(), 0) > 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      NX_CHECK(infer < 0, "reshape: only one dimension can be -1, got ", shape_str(shape));
      infer = int64_t(i);
    } else {
      NX_CHECK(shape[i] >= 0, "reshape: invalid dimension ", shape[i], " in ", shape_str(shape));
      // Past int64, the dims count more elements than any tensor has (a 0 among them: none).
      NX_CHECK(empty || checked_mul(known, shape[i], &known), "reshape: cannot reshape a tensor of shape ",
               shape_str(x.shape()), " (", x.numel(), " elements) into ", shape_str(shape),
               ": its dimensions multiply past 2^63");
    }
  }
  if (empty) known = 0;
  if (infer >= 0) {
    NX_CHECK(known != 0 && x.numel() % known == 0, "reshape: cannot reshape a tensor of shape ", shape_str(x.shape()),
             " into ", shape_str(shape));
    shape[size_t(infer)] = x.numel() / known;
  }
  NX_CHECK(numel(shape) == x.numel(), "reshape: cannot reshape a tensor of shape ", shape_str(x.shape()), " (",
           x.numel(), " elements) into ", shape_str(shape));
  Strides st;
  Tensor out =
      view_strides(x, shape, st) ? make_view(x, x.offset(), shape, st) : reshape(contiguous(x.detach()), shape);
  return autograd::record("reshape", out, {x}, grad::reshape(x.shape()));
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t n = x.ndim();
  NX_CHECK(int64_t(dims.size()) == n, "permute: got ", dims.size(), " dims for a tensor of ", n,
           " dimensions; pass a permutation of 0..", n - 1);
  std::vector<int64_t> d(dims.size());
  std::vector<bool> seen(static_cast<size_t>(n), false);
  Shape shape(static_cast<size_t>(n));
  Strides st(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    d[i] = wrap_axis(dims[i], n, "permute");
    NX_CHECK(!seen[d[i]], "permute: dimension ", d[i], " repeated; pass a permutation of 0..", n - 1);
    seen[d[i]] = true;
    shape[i] = x.shape()[d[i]];
    st[i] = x.strides()[d[i]];
  }
  return autograd::record("permute", make_view(x, x.offset(), shape, st), {x}, grad::permute(d));
}

Tensor transpose(const Tensor& x, int64_t a, int64_t b) {
  int64_t n = x.ndim();
  a = wrap_axis(a, n, "transpose");
  b = wrap_axis(b, n, "transpose");
  std::vector<int64_t> dims(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) dims[i] = i;
  if (n > 0) std::swap(dims[a], dims[b]);
  return permute(x, dims);
}

Tensor expand(const Tensor& x, const Shape& shape_in) {
  Shape shape = shape_in;
  NX_CHECK(shape.size() >= x.shape().size(), "expand: cannot expand shape ", shape_str(x.shape()), " to ",
           shape_str(shape), " (fewer dimensions)");
  size_t off = shape.size() - x.shape().size();
  Strides st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < off) {
      NX_CHECK(shape[i] >= 0, "expand: -1 is not allowed for new leading dimensions in ", shape_str(shape));
      continue;
    }
    int64_t have = x.shape()[i - off];
    if (shape[i] == -1) shape[i] = have;
    NX_CHECK(have == shape[i] || have == 1, "expand: cannot expand shape ", shape_str(x.shape()), " to ",
             shape_str(shape_in), " (dimension ", i, ": ", have, " vs ", shape[i], ")");
    st[i] = have == 1 && shape[i] != 1 ? 0 : x.strides()[i - off];
  }
  return autograd::record("expand", make_view(x, x.offset(), shape, st), {x}, grad::expand(x.shape()));
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
  NX_CHECK_INDEX(x.ndim() > 0, "slice: a 0-d tensor has no axis to slice (as numpy: invalid index to a scalar)");
  axis = wrap_axis(axis, x.ndim(), "slice");
  NX_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = x.shape()[axis];
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp(start);
  stop = std::max(clamp(stop), start);
  Shape shape = x.shape();
  Strides st = x.strides();
  shape[axis] = (stop - start) / step + ((stop - start) % step != 0);  // ceil, without step - 1 overflowing
  // A step past the axis keeps at most one element, whose stride is never walked.
  if (!checked_mul(st[axis], step, &st[axis])) st[axis] = x.strides()[axis];
  Tensor out = make_view(x, x.offset() + start * x.strides()[axis], shape, st);
  return autograd::record("slice", out, {x}, grad::slice(x.shape(), axis, start, step));
}

Tensor select(const Tensor& x, int64_t axis, int64_t index) {
  NX_CHECK_INDEX(x.ndim() > 0, "index ", index,
                 " of a 0-d tensor: it has no axis to index (as numpy: invalid index to a scalar)");
  axis = wrap_axis(axis, x.ndim(), "select");
  int64_t n = x.shape()[axis];
  NX_CHECK_INDEX(index >= -n && index < n, "index ", index, " is out of bounds for axis ", axis, " with size ", n);
  if (index < 0) index += n;
  Shape shape = x.shape();
  shape.erase(shape.begin() + axis);
  return reshape(slice(x, axis, index, index + 1, 1), shape);
}

Tensor unsqueeze(const Tensor& x, int64_t axis) {
  axis = wrap_axis(axis, x.ndim() + 1, "unsqueeze");
  Shape shape = x.shape();
  shape.insert(shape.begin() + axis, 1);
  return reshape(x, shape);
}

// Checks that `index` is an integer tensor with values in [-n, n); returns it on the host as
// contiguous int64 with negative values wrapped (the checks read every index there).
static Tensor checked_index(const Tensor& index, int64_t n, const char* op) {
  NX_CHECK_INDEX(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, op, ": indices must be integers, got ",
                 dtype_name(index.dtype()));
  Tensor idx = contiguous(cast(to_device(index.detach(), Device::cpu()), DType::Int64), /*force_copy=*/true);
  int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    NX_CHECK_INDEX(p[i] >= -n && p[i] < n, op, ": index ", p[i], " is out of bounds for axis 0 with size ", n);
    if (p[i] < 0) p[i] += n;
  }
  return idx;
}

Tensor index_select(const Tensor& x, const Tensor& index) {
  NX_CHECK_INDEX(x.ndim() >= 1, "index: cannot index a 0-d tensor with an array");
  Tensor idx = checked_index(index, x.shape()[0], "index");
  // On a device: gathered on the host and copied back (correct, with its gradient; not fast).
  if (!x.device().is_cpu()) return to_device(index_select(to_device(x, Device::cpu()), idx), x.device());
  Tensor src = contiguous(x.detach());
  Shape shape = idx.shape();
  shape.insert(shape.end(), x.shape().begin() + 1, x.shape().end());
  Tensor out = Tensor::empty(shape, x.dtype());
  size_t row = size_t(numel(Shape(x.shape().begin() + 1, x.shape().end())) * itemsize(x.dtype()));
  const char* s = static_cast<const char*>(src.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) std::memcpy(o + i * row, s + p[i] * row, row);
  return autograd::record("index", out, {x}, grad::index_select(x.shape(), idx));
}

Tensor index_add(const Tensor& base, const Tensor& index, const Tensor& src) {
  Tensor idx = checked_index(index, base.shape()[0], "index_add");
  if (!base.device().is_cpu())  // on the host and back, as index_select
    return to_device(index_add(to_device(base, Device::cpu()), idx, to_device(src, Device::cpu())), base.device());
  Tensor out = contiguous(cast(base, compute_dtype(base.dtype())), /*force_copy=*/true);
  Tensor s = contiguous(cast(to_device(src, Device::cpu()), out.dtype()));
  int64_t row = numel(Shape(base.shape().begin() + 1, base.shape().end()));
  const int64_t* p = idx.data<int64_t>();
  dispatch_compute(out.dtype(), "index_add", [&](auto t) {
    using T = decltype(t);
    T* o = out.data<T>();
    const T* v = s.data<T>();
    for (int64_t i = 0; i < idx.numel(); ++i)
      for (int64_t j = 0; j < row; ++j) o[p[i] * row + j] += v[i * row + j];
  });
  return cast(out, base.dtype());
}

void index_copy_(const Tensor& dst, const Tensor& index, const Tensor& src) {
  NX_CHECK_INDEX(dst.ndim() >= 1, "index assignment: cannot index a 0-d tensor with an array");
  Tensor idx = checked_index(index, dst.shape()[0], "index assignment");
  Shape target = idx.shape();  // the shape of dst[index]
  target.insert(target.end(), dst.shape().begin() + 1, dst.shape().end());
  NX_CHECK(broadcast_shapes(target, src.shape(), "index assignment") == target, "could not broadcast a value of shape ",
           shape_str(src.shape()), " into shape ", shape_str(target), " (the indexed rows)");
  Shape rows = {idx.numel()};
  rows.insert(rows.end(), dst.shape().begin() + 1, dst.shape().end());
  // A private copy of the rows: src may share (and overlap) dst's storage.
  Tensor s = reshape(contiguous(cpu::broadcast_view(src.detach(), target), /*force_copy=*/true), rows);
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) copy_(select(dst, 0, p[i]), select(s, 0, i));
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  NX_CHECK(!xs.empty(), "concat: expected at least one tensor");
  const Tensor& first = xs[0];
  NX_CHECK(first.ndim() > 0, "concat: zero-dimensional tensors cannot be concatenated; use stack");
  axis = wrap_axis(axis, first.ndim(), "concat");
  Shape shape = first.shape();
  DType dt = first.dtype();
  std::vector<Shape> shapes;
  shape[axis] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    bool same = t.ndim() == first.ndim();
    for (int64_t d = 0; same && d < t.ndim(); ++d) same = d == axis || t.shape()[d] == first.shape()[d];
    NX_CHECK(same, "concat: tensor ", i, " has shape ", shape_str(t.shape()), " but tensor 0 has ",
             shape_str(first.shape()), "; all dimensions except axis ", axis, " must match");
    shape[axis] += t.shape()[axis];
    dt = promote_types(dt, t.dtype());
    shapes.push_back(t.shape());
  }
  Device dev = first.device();
  for (const Tensor& t : xs)
    if (t.device() != dev)
      throw ValueError(str("concat: expected all tensors on one device, but found ", dev.str(), " and ",
                           t.device().str(), "; move them with .to(device) first"));
  Tensor out = Tensor::empty(shape, dt, dev);
  int64_t at = 0;
  for (const Tensor& t : xs) {
    Tensor dst = slice(out, axis, at, at + t.shape()[axis], 1);
    copy_(dst, t);
    at += t.shape()[axis];
  }
  return autograd::record("concat", out, xs, grad::concat(shapes, axis));
}

Tensor stack(const std::vector<Tensor>& xs, int64_t axis) {
  NX_CHECK(!xs.empty(), "stack: expected at least one tensor");
  axis = wrap_axis(axis, xs[0].ndim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < xs.size(); ++i) {
    NX_CHECK(xs[i].shape() == xs[0].shape(), "stack: tensor ", i, " has shape ", shape_str(xs[i].shape()),
             " but tensor 0 has ", shape_str(xs[0].shape()), "; all tensors must have the same shape");
    parts.push_back(unsqueeze(xs[i], axis));
  }
  return concat(parts, axis);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  size_t lead = x.shape().size() - shape.size();
  Axes axes;
  for (size_t i = 0; i < x.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) axes.push_back(int64_t(i));
  Tensor s = axes.empty() ? x : sum(x, axes, /*keepdims=*/true);
  return reshape(s, shape);
}

}  // namespace nexus::ops
