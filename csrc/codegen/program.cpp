#include "codegen/program.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "codegen/compile.h"
#include "codegen/interp.h"
#include "codegen/kernel_prelude.h"
#include "nexus/config.h"

namespace nexus::codegen {
namespace {

using ElemFn = void (*)(char* const*, const int64_t*, int64_t, const double*);
using ReduceFn = void (*)(char* const*, const int64_t*, int64_t, const double*, void*);
using RowFn = void (*)(char* const*, const int64_t*, int64_t, const double*, void*, int64_t);

// Dimensions of the iteration space after merging; strides in elements per operand.
struct Space {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides;  // [operand][dim]
};

// Merges adjacent dims of [begin, end) that are contiguous for every operand; drops size-1 dims.
void merge_into(Space& sp, const Shape& shape, const std::vector<std::vector<int64_t>>& st, size_t begin, size_t end) {
  const size_t nops = st.size();
  bool first = true;
  for (size_t d = begin; d < end; ++d) {
    if (shape[d] == 1) continue;
    bool merge = !first;
    for (size_t k = 0; k < nops && merge; ++k) merge = sp.strides[k].back() == st[k][d] * shape[d];
    if (merge) {
      sp.shape.back() *= shape[d];
      for (size_t k = 0; k < nops; ++k) sp.strides[k].back() = st[k][d];
    } else {
      sp.shape.push_back(shape[d]);
      for (size_t k = 0; k < nops; ++k) sp.strides[k].push_back(st[k][d]);
    }
    first = false;
  }
  if (first) {  // nothing left: one element
    sp.shape.push_back(1);
    for (size_t k = 0; k < nops; ++k) sp.strides[k].push_back(0);
  }
}

std::vector<int64_t> broadcast_strides(const Tensor& t, const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 0);
  size_t off = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i) st[off + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

Access classify(int64_t stride, int64_t n) {
  if (stride == 0 || n == 1) return stride == 0 ? Access::Bcast : Access::Contig;
  return stride == 1 ? Access::Contig : Access::Strided;
}

// The innermost stride of each of the first nin operands of `sp` (into `inner`) and how a kernel
// variant reads it over rows of n elements.
std::vector<Access> inner_access(const Space& sp, size_t nin, int64_t n,
                                 std::vector<int64_t>& inner) {
  std::vector<Access> access;
  for (size_t i = 0; i < nin; ++i) {
    inner.push_back(sp.strides[i].back());
    access.push_back(classify(inner.back(), n));
  }
  return access;
}

// Row r of `shape` (all dims but the last) as per-operand element offsets.
void row_offsets(const Space& sp, int64_t r, size_t ndims, std::vector<int64_t>& off) {
  std::fill(off.begin(), off.end(), 0);
  for (size_t d = ndims; d-- > 0;) {
    int64_t i = r % sp.shape[d];
    r /= sp.shape[d];
    for (size_t k = 0; k < off.size(); ++k) off[k] += i * sp.strides[k][d];
  }
}

union Acc {
  double f;
  int64_t i;
};

// Writes element `idx` of `out` from a finished accumulator, as the eager reduction (and, for
// mean, the eager multiply by 1/count in the result dtype) would produce it.
void store_reduced(const Tensor& out, int64_t idx, const Reduction& red, DType reg, Acc a, int64_t count) {
  const DType d = red.dtype;
  void* base = out.raw_data();
  if (!is_floating(reg)) {
    if (d == DType::Int64) static_cast<int64_t*>(base)[idx] = a.i;
    else if (d == DType::Int32) static_cast<int32_t*>(base)[idx] = int32_t(a.i);
    else NX_ASSERT(false, "integer reduction into ", dtype_name(d));
    return;
  }
  double v = a.f;
  auto round_to = [&](double x) -> float {
    float f = float(x);
    return d == DType::Float16 ? kern::round_f16(f) : d == DType::BFloat16 ? kern::round_bf16(f) : f;
  };
  if (red.kind == ReduceOp::Mean) {
    const double inv = count ? 1.0 / double(count) : std::nan("");
    if (d == DType::Float64) v = v * inv;
    else v = round_to(round_to(v) * round_to(inv));
  }
  switch (d) {
    case DType::Float64: static_cast<double*>(base)[idx] = v; break;
    case DType::Float32: static_cast<float*>(base)[idx] = float(v); break;
    case DType::Float16: static_cast<uint16_t*>(base)[idx] = float_to_fp16(float(v)); break;
    case DType::BFloat16: static_cast<uint16_t*>(base)[idx] = float_to_bf16(float(v)); break;
    default: NX_ASSERT(false, "float reduction into ", dtype_name(d));
  }
}

}  // namespace

Program::Program(FusedKernel k) : kernel_(std::move(k)) {
  kernel_.verify();
  name_ = kernel_.name();
}

std::string Program::key(const std::vector<Access>& access) const {
  const Compiler& c = host_compiler();
  Hasher h;
  h.add(kernel_.structure()).add(c.identity).add(full_flags(c)).add(NEXUS_VERSION).add(renderer_fingerprint());
  for (Access a : access) h.add(access_name(a));
  return h.hex();
}

std::string Program::source(Dialect d, std::vector<Access> access) const {
  if (access.empty()) access.assign(kernel_.inputs.size(), Access::Contig);
  NX_CHECK(access.size() == kernel_.inputs.size(), "source: ", kernel_.inputs.size(), " inputs, ",
           access.size(), " access classes given");
  return render(kernel_, access, d, key(access)).text;
}

ProgramStats Program::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Program::Fn Program::variant(const std::vector<Access>& access) {
  const bool jit = jit_enabled();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = variants_.find({access, jit});
  if (it != variants_.end()) return it->second;
  Fn fn = nullptr;
  if (jit) {
    const std::string k = key(access);
    Source src = render(kernel_, access, Dialect::Cpp, k);
    Loaded l = load_or_build(k, src.name, src.text);
    fn = l.fn;
    if (l.compiled) {
      ++stats_.compiles;
      stats_.compile_seconds += l.seconds;
    } else {
      ++stats_.cache_hits;
    }
  } else {
    ++stats_.interpreted;
  }
  variants_.emplace(std::make_pair(access, jit), fn);
  return fn;
}

std::vector<Tensor> Program::run(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                 std::vector<Tensor> outputs) {
  const FusedKernel& k = kernel_;
  NX_CHECK(inputs.size() == k.inputs.size(), name_, ": expected ", k.inputs.size(), " inputs, got ", inputs.size());
  NX_CHECK(int(consts.size()) == k.num_consts, name_, ": expected ", k.num_consts, " constants, got ", consts.size());
  Shape shape;
  for (size_t i = 0; i < inputs.size(); ++i) {
    NX_CHECK(inputs[i].defined(), name_, ": input ", i, " is undefined");
    NX_CHECK_TYPE(inputs[i].dtype() == k.inputs[i], name_, ": input ", i, " has dtype ",
                  dtype_name(inputs[i].dtype()), ", the kernel was built for ", dtype_name(k.inputs[i]));
    shape = i ? broadcast_shapes(shape, inputs[i].shape(), name_.c_str()) : inputs[i].shape();
  }
  const size_t nin = inputs.size();
  std::vector<std::vector<int64_t>> st;
  for (const Tensor& t : inputs) st.push_back(broadcast_strides(t, shape));
  outputs.resize(k.num_outputs());

  if (!k.has_reduce()) {
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (!outputs[o].defined()) outputs[o] = Tensor::empty(shape, k.output_dtype(o));
      NX_CHECK(outputs[o].shape() == shape && outputs[o].dtype() == k.output_dtype(o) && outputs[o].is_contiguous(),
               name_, ": output ", o, " must be a contiguous ", dtype_name(k.output_dtype(o)), " tensor of shape ",
               shape_str(shape));
      st.push_back(contiguous_strides(shape));
    }
    if (numel(shape) == 0) return outputs;
    Space sp;
    sp.strides.resize(st.size());
    merge_into(sp, shape, st, 0, shape.size());
    const int64_t n = sp.shape.back();
    std::vector<int64_t> inner;
    const std::vector<Access> access = inner_access(sp, nin, n, inner);
    Fn fn = variant(access);
    std::vector<char*> base;
    for (size_t i = 0; i < nin; ++i) base.push_back(static_cast<char*>(inputs[i].raw_data()));
    for (const Tensor& t : outputs) base.push_back(static_cast<char*>(t.raw_data()));
    std::vector<int64_t> isz;
    for (size_t i = 0; i < nin; ++i) isz.push_back(itemsize(k.inputs[i]));
    for (size_t o = 0; o < outputs.size(); ++o) isz.push_back(itemsize(k.output_dtype(o)));
    auto call = [&](const std::vector<int64_t>& off, int64_t len) {
      std::vector<char*> p(base.size());
      for (size_t j = 0; j < p.size(); ++j) p[j] = base[j] + off[j] * isz[j];
      if (fn) reinterpret_cast<ElemFn>(fn)(p.data(), inner.data(), len, consts.data());
      else interp_elementwise(k, access, p.data(), inner.data(), len, consts.data());
    };
    const size_t nd = sp.shape.size();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < nd; ++d) rows *= sp.shape[d];
    if (rows == 1) {
      parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
        std::vector<int64_t> off(base.size());
        for (size_t j = 0; j < off.size(); ++j) off[j] = b * sp.strides[j].back();
        call(off, e - b);
      });
    } else {
      parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / n), [&](int64_t rb, int64_t re) {
        std::vector<int64_t> off(base.size());
        for (int64_t r = rb; r < re; ++r) {
          row_offsets(sp, r, nd - 1, off);
          call(off, n);
        }
      });
    }
    return outputs;
  }

  const Reduction& red = k.reduce;
  NX_CHECK(int64_t(shape.size()) == k.ndim, name_, ": the kernel reduces a rank-", k.ndim,
           " iteration shape, the inputs broadcast to ", shape_str(shape));
  if (k.has_side_outputs()) return run_rows(inputs, consts, shape, std::move(st), std::move(outputs));

  // ---- reduction: keep dims first, reduced dims last (each group merged on its own) ----
  std::vector<int64_t> axes = red.axes;
  if (axes.empty())
    for (int64_t d = 0; d < k.ndim; ++d) axes.push_back(d);
  Shape pshape, out_shape;
  std::vector<std::vector<int64_t>> pst(nin);
  std::vector<size_t> order;
  for (int64_t d = 0; d < k.ndim; ++d) {
    bool r = std::binary_search(axes.begin(), axes.end(), d);
    if (!r) order.push_back(size_t(d));
    if (!r) out_shape.push_back(shape[d]);
    else if (red.keepdims) out_shape.push_back(1);
  }
  const size_t nkeep = order.size();
  for (int64_t a : axes) order.push_back(size_t(a));
  for (size_t d : order) {
    pshape.push_back(shape[d]);
    for (size_t i = 0; i < nin; ++i) pst[i].push_back(st[i][d]);
  }
  if (outputs[0].defined())
    NX_CHECK(outputs[0].shape() == out_shape && outputs[0].dtype() == red.dtype && outputs[0].is_contiguous(),
             name_, ": output must be a contiguous ", dtype_name(red.dtype), " tensor of shape ", shape_str(out_shape));
  else
    outputs[0] = Tensor::empty(out_shape, red.dtype);
  const Tensor& out = outputs[0];
  int64_t O = 1, count = 1;
  for (size_t d = 0; d < nkeep; ++d) O *= pshape[d];
  for (size_t d = nkeep; d < pshape.size(); ++d) count *= pshape[d];
  if (O == 0) return outputs;
  const DType reg = k.instrs[size_t(red.reg)].dtype;
  if (count == 0) {
    NX_CHECK(red.kind == ReduceOp::Sum || red.kind == ReduceOp::Mean, name_, ": ", reduce_op_name(red.kind),
             " over a zero-size axis has no identity; reduce over non-empty axes");
    for (int64_t o = 0; o < O; ++o) store_reduced(out, o, red, reg, is_floating(reg) ? Acc{0.0} : Acc{.i = 0}, 0);
    return outputs;
  }
  Space keep, rsp;
  keep.strides.resize(nin);
  rsp.strides.resize(nin);
  merge_into(keep, pshape, pst, 0, nkeep);
  merge_into(rsp, pshape, pst, nkeep, pshape.size());
  const int64_t n = rsp.shape.back();
  const int64_t rows_per_out = count / n;
  std::vector<int64_t> inner;
  const std::vector<Access> access = inner_access(rsp, nin, n, inner);
  Fn fn = variant(access);
  const int64_t chunks = (n + kern::kChunk - 1) / kern::kChunk;
  const int64_t per_out = rows_per_out * chunks;
  std::vector<Acc> partial(size_t(O * per_out));
  std::vector<int64_t> isz;
  for (size_t i = 0; i < nin; ++i) isz.push_back(itemsize(k.inputs[i]));
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::min(n, kern::kChunk));
  parallel_for(O * per_out, grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> ko(nin), ro(nin);
    std::vector<char*> p(nin);
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / per_out, row = (item % per_out) / chunks, ch = item % chunks;
      row_offsets(keep, o, keep.shape.size(), ko);
      row_offsets(rsp, row, rsp.shape.size() - 1, ro);
      for (size_t i = 0; i < nin; ++i)
        p[i] = static_cast<char*>(inputs[i].raw_data()) + (ko[i] + ro[i] + ch * kern::kChunk * inner[i]) * isz[i];
      const int64_t len = std::min(kern::kChunk, n - ch * kern::kChunk);
      if (fn) reinterpret_cast<ReduceFn>(fn)(p.data(), inner.data(), len, consts.data(), &partial[size_t(item)]);
      else interp_reduce(k, access, p.data(), inner.data(), len, consts.data(), &partial[size_t(item)]);
    }
  });
  const bool sum = red.kind == ReduceOp::Sum || red.kind == ReduceOp::Mean;
  const bool fl = is_floating(reg);
  for (int64_t o = 0; o < O; ++o) {
    const Acc* part = &partial[size_t(o * per_out)];
    Acc a = part[0];
    for (int64_t j = 1; j < per_out; ++j) {
      if (sum) fl ? (void)(a.f += part[j].f) : (void)(a.i += part[j].i);
      else if (fl) a.f = red.kind == ReduceOp::Max ? kern::pick_max(a.f, part[j].f) : kern::pick_min(a.f, part[j].f);
      else a.i = red.kind == ReduceOp::Max ? std::max(a.i, part[j].i) : std::min(a.i, part[j].i);
    }
    store_reduced(out, o, red, reg, a, count);
  }
  return outputs;
}

std::vector<Tensor> Program::run_rows(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                      const Shape& shape, std::vector<std::vector<int64_t>> st,
                                      std::vector<Tensor> outputs) {
  const FusedKernel& k = kernel_;
  const Reduction& red = k.reduce;
  const size_t nin = inputs.size(), nside = k.outputs.size(), lead = red.axes.size();
  Shape out_shape(red.keepdims ? lead : 0, 1);
  out_shape.insert(out_shape.end(), shape.begin() + int64_t(lead), shape.end());
  for (size_t o = 0; o <= nside; ++o) {
    const Shape& want = o < nside ? shape : out_shape;
    const DType t = k.output_dtype(o);
    if (!outputs[o].defined()) outputs[o] = Tensor::empty(want, t);
    NX_CHECK(outputs[o].shape() == want && outputs[o].dtype() == t && outputs[o].is_contiguous(), name_,
             ": output ", o, " must be a contiguous ", dtype_name(t), " tensor of shape ", shape_str(want));
    if (o < nside) st.push_back(contiguous_strides(shape));
  }
  const Tensor& out = outputs[nside];
  const int64_t rows = numel(Shape(shape.begin(), shape.begin() + int64_t(lead)));
  const int64_t cols = out.numel();
  const DType reg = k.instrs[size_t(red.reg)].dtype;
  if (cols == 0) return outputs;
  // One accumulator per output element, in the register's type (float for float32 and halves).
  const bool dbl = reg == DType::Float64;
  std::vector<double> acc_d(size_t(dbl ? cols : 0));
  std::vector<float> acc_f(size_t(dbl ? 0 : cols));
  if (rows > 0) {
    Space rsp, keep;
    rsp.strides.resize(st.size());
    keep.strides.resize(st.size());
    merge_into(rsp, shape, st, 0, lead);
    merge_into(keep, shape, st, lead, shape.size());
    const int64_t n = keep.shape.back();
    for (size_t o = 0; o < nside; ++o)
      NX_ASSERT(n == 1 || keep.strides[nin + o].back() == 1, "side outputs are contiguous along the kept dims");
    std::vector<int64_t> inner;
    const std::vector<Access> access = inner_access(keep, nin, n, inner);
    Fn fn = variant(access);
    std::vector<char*> base;
    std::vector<int64_t> isz;
    for (size_t i = 0; i < nin; ++i) {
      base.push_back(static_cast<char*>(inputs[i].raw_data()));
      isz.push_back(itemsize(k.inputs[i]));
    }
    for (size_t o = 0; o < nside; ++o) {
      base.push_back(static_cast<char*>(outputs[o].raw_data()));
      isz.push_back(itemsize(k.output_dtype(o)));
    }
    // Tasks: blocks of columns (of the innermost kept run), each over every row in order. Wide
    // blocks (one per thread) keep each row's reads long and contiguous; a narrow block walking
    // many rows would touch a new page per call.
    const int64_t per_thread = (n + num_threads() - 1) / num_threads();
    const int64_t block = std::min(n, std::max<int64_t>({64, per_thread, kElementwiseGrain / rows}));
    const int64_t blocks = (n + block - 1) / block, outer = cols / n;
    parallel_for(outer * blocks, 1, [&](int64_t b, int64_t e) {
      std::vector<int64_t> ko(base.size()), ro(base.size());
      std::vector<char*> p(base.size());
      for (int64_t task = b; task < e; ++task) {
        const int64_t o = task / blocks, j0 = (task % blocks) * block, len = std::min(block, n - j0);
        row_offsets(keep, o, keep.shape.size() - 1, ko);
        void* acc = dbl ? static_cast<void*>(&acc_d[size_t(o * n + j0)]) : static_cast<void*>(&acc_f[size_t(o * n + j0)]);
        for (int64_t r = 0; r < rows; ++r) {
          row_offsets(rsp, r, rsp.shape.size(), ro);
          for (size_t j = 0; j < p.size(); ++j)
            p[j] = base[j] + (ko[j] + ro[j] + j0 * (j < nin ? inner[j] : 1)) * isz[j];
          if (fn) reinterpret_cast<RowFn>(fn)(p.data(), inner.data(), len, consts.data(), acc, r == 0);
          else interp_reduce_row(k, access, p.data(), inner.data(), len, consts.data(), acc, r == 0);
        }
      }
    });
  }
  for (int64_t o = 0; o < cols; ++o)
    store_reduced(out, o, red, reg, Acc{rows ? (dbl ? acc_d[size_t(o)] : double(acc_f[size_t(o)])) : 0.0}, rows);
  return outputs;
}

std::shared_ptr<Program> get_program(const FusedKernel& k) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Program>> programs;
  const std::string s = k.structure();
  std::lock_guard<std::mutex> lock(mu);
  auto it = programs.find(s);
  if (it == programs.end()) it = programs.emplace(s, std::make_shared<Program>(k)).first;
  return it->second;
}

}  // namespace nexus::codegen
