#include "codegen/program.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "base/cpu_variant_dispatch.h"
#include "base/error.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "codegen/compile.h"
#include "codegen/interp.h"
#include "codegen/kernel_prelude.h"
#include "device/backend.h"
#include "nexus/config.h"

namespace nexus::codegen {

const Interp& interp() {
  static const Interp& table = with_cpu_variant([](auto v) -> const Interp& { return interp_for(v); });
  return table;
}
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

// A kernel variant resolved for one call: how it reads each input over rows of n elements (the
// access classes), the inputs' innermost strides, and its function (null: the interpreter runs it).
struct Variant {
  std::vector<Access> access;
  std::vector<int64_t> inner;
  void* fn = nullptr;
};

// The access classes and innermost strides of the first nin operands of `sp` (fn left to fill).
Variant inner_access(const Space& sp, size_t nin, int64_t n) {
  Variant v;
  for (size_t i = 0; i < nin; ++i) {
    v.inner.push_back(sp.strides[i].back());
    v.access.push_back(classify(v.inner.back(), n));
  }
  return v;
}

// Each operand's base pointer and item size: `inputs`, then `outputs`.
struct Operands {
  std::vector<char*> base;
  std::vector<int64_t> isz;
};

Operands operands(const std::vector<Tensor>& inputs, std::span<const Tensor> outputs) {
  Operands args;
  for (const Tensor& t : inputs) {
    args.base.push_back(static_cast<char*>(t.raw_data()));
    args.isz.push_back(itemsize(t.dtype()));
  }
  for (const Tensor& t : outputs) {
    args.base.push_back(static_cast<char*>(t.raw_data()));
    args.isz.push_back(itemsize(t.dtype()));
  }
  return args;
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

// A reduction's iteration space split in two, each part merged on its own: `keep` (the dims the
// output keeps; outer: its element count) and `reduced` (count: the elements each output reads).
struct ReduceSpace {
  Space keep, reduced;
  Shape out_shape;
  int64_t outer = 1, count = 1;
};

// Splits `shape` (strides `st` per operand) into kept dims first and reduced dims last.
ReduceSpace reduce_space(const Reduction& red, const Shape& shape, const std::vector<std::vector<int64_t>>& st) {
  const int64_t ndim = int64_t(shape.size());
  std::vector<int64_t> axes = red.axes;
  if (axes.empty())
    for (int64_t d = 0; d < ndim; ++d) axes.push_back(d);
  ReduceSpace rs;
  std::vector<size_t> order;
  for (int64_t d = 0; d < ndim; ++d) {
    const bool r = std::binary_search(axes.begin(), axes.end(), d);
    if (!r) order.push_back(size_t(d));
    if (!r) rs.out_shape.push_back(shape[d]);
    else if (red.keepdims) rs.out_shape.push_back(1);
  }
  const size_t nkeep = order.size();
  for (int64_t a : axes) order.push_back(size_t(a));
  Shape pshape;
  std::vector<std::vector<int64_t>> pst(st.size());
  for (size_t d : order) {
    pshape.push_back(shape[d]);
    for (size_t i = 0; i < st.size(); ++i) pst[i].push_back(st[i][d]);
  }
  for (size_t d = 0; d < nkeep; ++d) rs.outer *= pshape[d];
  for (size_t d = nkeep; d < pshape.size(); ++d) rs.count *= pshape[d];
  rs.keep.strides.resize(st.size());
  rs.reduced.strides.resize(st.size());
  merge_into(rs.keep, pshape, pst, 0, nkeep);
  merge_into(rs.reduced, pshape, pst, nkeep, pshape.size());
  return rs;
}

// One partial accumulator per (output element, row of the reduced dims, chunk of kChunk of a row):
// chunks are fixed, so the result does not depend on the thread count. The partials are visited
// in the order of memory: output by output, or row by row where the reduced rows lie further
// apart than the outputs (a sum over (N, H, W) of (N, C, H, W): each batch row, channel after
// channel); either order fills the same partials.
std::vector<Acc> reduce_chunks(const FusedKernel& k, const Variant& v, const ReduceSpace& rs, const Operands& args,
                               const std::vector<double>& consts, int64_t chunks, int64_t per_out) {
  const size_t nin = v.inner.size(), nops = args.base.size();  // inputs, then side outputs (inner stride 1)
  const int64_t n = rs.reduced.shape.back(), rows = per_out / chunks;
  const size_t outer_dims = rs.reduced.shape.size() - 1;
  const bool rows_first = rows > 1 && !rs.keep.shape.empty() && outer_dims > 0 &&
                          std::abs(rs.reduced.strides[0][outer_dims - 1]) > std::abs(rs.keep.strides[0].back());
  std::vector<Acc> partial(size_t(rs.outer * per_out));
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::min(n, kern::kChunk));
  parallel_for(rs.outer * per_out, grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> ko(nops), ro(nops);
    std::vector<char*> p(nops);
    for (int64_t visit = b; visit < e; ++visit) {
      const int64_t ch = visit % chunks, o = rows_first ? visit / chunks % rs.outer : visit / per_out,
                    row = rows_first ? visit / (chunks * rs.outer) : visit / chunks % rows;
      const int64_t item = o * per_out + row * chunks + ch;
      row_offsets(rs.keep, o, rs.keep.shape.size(), ko);
      row_offsets(rs.reduced, row, rs.reduced.shape.size() - 1, ro);
      for (size_t i = 0; i < nops; ++i)
        p[i] = args.base[i] + (ko[i] + ro[i] + ch * kern::kChunk * (i < nin ? v.inner[i] : 1)) * args.isz[i];
      const int64_t len = std::min(kern::kChunk, n - ch * kern::kChunk);
      Acc* acc = &partial[size_t(item)];
      if (v.fn) reinterpret_cast<ReduceFn>(v.fn)(p.data(), v.inner.data(), len, consts.data(), acc);
      else interp().reduce(k, v.access, p.data(), v.inner.data(), len, consts.data(), acc);
    }
  });
  return partial;
}

// One output element's partial accumulators, combined in order.
Acc combine(const Reduction& red, DType reg, const Acc* part, int64_t n) {
  const bool sum = red.kind == ReduceOp::Sum || red.kind == ReduceOp::Mean;
  const bool fl = is_floating(reg);
  Acc a = part[0];
  for (int64_t j = 1; j < n; ++j) {
    if (sum) fl ? (void)(a.f += part[j].f) : (void)(a.i += part[j].i);
    else if (fl) a.f = red.kind == ReduceOp::Max ? kern::pick_max(a.f, part[j].f) : kern::pick_min(a.f, part[j].f);
    else a.i = red.kind == ReduceOp::Max ? std::max(a.i, part[j].i) : std::min(a.i, part[j].i);
  }
  return a;
}

// A reduction over the leading dims that also stores its side outputs: accumulates every row
// (rs.reduced, rs.count rows) into `acc`, one accumulator of acc_size bytes per element of the
// kept dims (rs.keep, rs.outer elements), writing the side outputs as it goes.
void reduce_rows(const FusedKernel& k, const Variant& v, const ReduceSpace& rs, const Operands& args,
                 const std::vector<double>& consts, void* acc, size_t acc_size) {
  const size_t nin = v.inner.size();
  const int64_t n = rs.keep.shape.back(), rows = rs.count;
  // Tasks: blocks of columns (of the innermost kept run), each over every row in order. Wide
  // blocks (one per thread) keep each row's reads long and contiguous; a narrow block walking
  // many rows would touch a new page per call.
  const int64_t per_thread = (n + num_threads() - 1) / num_threads();
  const int64_t block = std::min(n, std::max<int64_t>({64, per_thread, kElementwiseGrain / rows}));
  const int64_t blocks = (n + block - 1) / block, outer = rs.outer / n;
  parallel_for(outer * blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<int64_t> ko(args.base.size()), ro(args.base.size());
    std::vector<char*> p(args.base.size());
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / blocks, j0 = (task % blocks) * block, len = std::min(block, n - j0);
      row_offsets(rs.keep, o, rs.keep.shape.size() - 1, ko);
      void* a = static_cast<char*>(acc) + size_t(o * n + j0) * acc_size;
      for (int64_t r = 0; r < rows; ++r) {
        row_offsets(rs.reduced, r, rs.reduced.shape.size(), ro);
        for (size_t j = 0; j < p.size(); ++j)
          p[j] = args.base[j] + (ko[j] + ro[j] + j0 * (j < nin ? v.inner[j] : 1)) * args.isz[j];
        if (v.fn) reinterpret_cast<RowFn>(v.fn)(p.data(), v.inner.data(), len, consts.data(), a, r == 0);
        else interp().reduce_row(k, v.access, p.data(), v.inner.data(), len, consts.data(), a, r == 0);
      }
    }
  });
}

}  // namespace

Program::Program(FusedKernel k) : kernel_(std::move(k)) {
  kernel_.verify();
  name_ = kernel_.name();
}

std::string Program::key(const std::vector<Access>& access) const {
  const Compiler& c = host_compiler();
  Hasher h;
  h.add(kernel_.structure()).add(c.identity).add(full_flags(c)).add(c.target).add(NEXUS_VERSION);
  h.add(renderer_fingerprint());
  for (Access a : access) h.add(access_name(a));
  return h.hex();
}

std::string Program::cuda_key(const std::vector<Access>& access) const {
  // No host compiler in it: a CUDA kernel does not depend on one.
  Hasher h;
  h.add(kernel_.structure()).add(NEXUS_VERSION).add(renderer_fingerprint()).add(cuda_args_fingerprint()).add("cuda");
  for (Access a : access) h.add(access_name(a));
  return h.hex();
}

std::string Program::source(Dialect d, std::vector<Access> access) const {
  if (access.empty()) access.assign(kernel_.inputs.size(), Access::Contig);
  NX_CHECK(access.size() == kernel_.inputs.size(), "source: ", kernel_.inputs.size(), " inputs, ", access.size(),
           " access classes given");
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
    Loaded l = load_or_build(k, src.name, src.text, cpp_prelude());
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

// The iteration shape `inputs` broadcast to, after checking them against the kernel.
Shape Program::iteration_shape(const std::vector<Tensor>& inputs, const std::vector<double>& consts) const {
  const FusedKernel& k = kernel_;
  NX_CHECK(inputs.size() == k.inputs.size(), name_, ": expected ", k.inputs.size(), " inputs, got ", inputs.size());
  NX_CHECK(int(consts.size()) == k.num_consts, name_, ": expected ", k.num_consts, " constants, got ", consts.size());
  Shape shape;
  for (size_t i = 0; i < inputs.size(); ++i) {
    NX_CHECK(inputs[i].defined(), name_, ": input ", i, " is undefined");
    NX_CHECK_TYPE(inputs[i].dtype() == k.inputs[i], name_, ": input ", i, " has dtype ", dtype_name(inputs[i].dtype()),
                  ", the kernel was built for ", dtype_name(k.inputs[i]));
    shape = i ? broadcast_shapes(shape, inputs[i].shape(), name_.c_str()) : inputs[i].shape();
  }
  if (k.has_reduce())
    NX_CHECK(int64_t(shape.size()) == k.ndim, name_, ": the kernel reduces a rank-", k.ndim,
             " iteration shape, the inputs broadcast to ", shape_str(shape));
  return shape;
}

std::vector<Tensor> Program::run(const std::vector<Tensor>& inputs, const std::vector<double>& consts) {
  for (const Tensor& t : inputs)
    if (t.defined() && !t.device().is_cpu()) return run_device(inputs, consts, t.device());
  const Shape shape = iteration_shape(inputs, consts);
  std::vector<std::vector<int64_t>> st;
  for (const Tensor& t : inputs) st.push_back(broadcast_strides(t, shape));
  if (!kernel_.has_reduce()) return run_elementwise(inputs, consts, shape, std::move(st));
  if (kernel_.reduces_rows()) return run_rows(inputs, consts, shape, std::move(st));
  return run_reduce(inputs, consts, shape, std::move(st));
}

std::vector<Tensor> Program::run_elementwise(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                             const Shape& shape, std::vector<std::vector<int64_t>> st) {
  const FusedKernel& k = kernel_;
  std::vector<Tensor> outputs;
  for (size_t o = 0; o < k.num_outputs(); ++o) {
    outputs.push_back(Tensor::empty(shape, k.output_dtype(o)));
    st.push_back(contiguous_strides(shape));
  }
  if (numel(shape) == 0) return outputs;
  Space sp;
  sp.strides.resize(st.size());
  merge_into(sp, shape, st, 0, shape.size());
  const int64_t n = sp.shape.back();
  Variant v = inner_access(sp, inputs.size(), n);
  v.fn = variant(v.access);
  const Operands args = operands(inputs, outputs);
  auto call = [&](const std::vector<int64_t>& off, int64_t len) {
    std::vector<char*> p(args.base.size());
    for (size_t j = 0; j < p.size(); ++j) p[j] = args.base[j] + off[j] * args.isz[j];
    if (v.fn) reinterpret_cast<ElemFn>(v.fn)(p.data(), v.inner.data(), len, consts.data());
    else interp().elementwise(k, v.access, p.data(), v.inner.data(), len, consts.data());
  };
  const size_t nd = sp.shape.size();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) rows *= sp.shape[d];
  if (rows == 1) {
    parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      std::vector<int64_t> off(args.base.size());
      for (size_t j = 0; j < off.size(); ++j) off[j] = b * sp.strides[j].back();
      call(off, e - b);
    });
  } else {
    parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / n), [&](int64_t rb, int64_t re) {
      std::vector<int64_t> off(args.base.size());
      for (int64_t r = rb; r < re; ++r) {
        row_offsets(sp, r, nd - 1, off);
        call(off, n);
      }
    });
  }
  return outputs;
}

std::vector<Tensor> Program::run_device(const std::vector<Tensor>& given, const std::vector<double>& consts,
                                        Device device) {
  const FusedKernel& k = kernel_;
  NX_ASSERT(runs_on_device(k), name_, " reached a device, which runs elementwise kernels of at most ", kMaxKernelArgs,
            " operands only");
  std::vector<Tensor> inputs = given;
  device::Backend& be = device::backend(device);
  for (Tensor& t : inputs) {  // host scalars go with any device's tensors: copy them over
    if (!t.defined() || t.device() == device) continue;
    NX_CHECK(t.device().is_cpu() && t.numel() == 1, name_, ": inputs on ", t.device().str(), " and ", device.str(),
             "; a fused kernel runs on one device");
    Tensor d = Tensor::empty(t.shape(), t.dtype(), device);
    be.copy_bytes(d.raw_data(), device, t.raw_data(), Device::cpu(), size_t(itemsize(t.dtype())), false);
    t = d;
  }
  const Shape shape = iteration_shape(inputs, consts);
  std::vector<std::vector<int64_t>> st;
  for (const Tensor& t : inputs) st.push_back(broadcast_strides(t, shape));
  std::vector<Tensor> outputs;
  for (size_t o = 0; o < k.num_outputs(); ++o) outputs.push_back(Tensor::empty(shape, k.output_dtype(o), device));
  const int64_t total = numel(shape);
  if (total == 0) return outputs;
  Space sp;  // the inputs only: the outputs are contiguous, element t at t
  sp.strides.resize(st.size());
  merge_into(sp, shape, st, 0, shape.size());
  const size_t outer = sp.shape.size() - 1;
  NX_CHECK(outer <= size_t(kMaxKernelDims), name_, ": the iteration shape ", shape_str(shape), " does not merge into ",
           kMaxKernelDims + 1, " or fewer dimensions on ", device.str(), "; make the inputs contiguous first");
  const int64_t n = sp.shape.back();
  const Variant v = inner_access(sp, inputs.size(), n);
  CudaArgs args{};
  for (size_t j = 0; j < inputs.size(); ++j) {
    args.p[j] = static_cast<char*>(inputs[j].raw_data());
    args.s[j] = v.inner[j];
    for (size_t d = 0; d < outer; ++d) args.st[j][d] = sp.strides[j][outer - 1 - d];  // innermost first
  }
  for (size_t o = 0; o < outputs.size(); ++o) args.p[inputs.size() + o] = static_cast<char*>(outputs[o].raw_data());
  for (size_t j = 0; j < consts.size(); ++j) args.c[j] = consts[j];
  args.inner = n;
  args.nd = int64_t(outer);
  for (size_t d = 0; d < outer; ++d) args.shape[d] = sp.shape[outer - 1 - d];
  be.launch_generated(
      cuda_key(v.access), [&] { return render(k, v.access, Dialect::Cuda, cuda_key(v.access)).text; }, name_, &args,
      sizeof args, total, device.index);
  return outputs;
}

bool runs_on_device(const FusedKernel& k) {
  return !k.has_reduce() && k.inputs.size() + k.num_outputs() <= size_t(kMaxKernelArgs) &&
         k.num_consts <= kMaxKernelArgs;
}

// Keep dims first, reduced dims last; partial sums per chunk, combined in a fixed order.
std::vector<Tensor> Program::run_reduce(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                        const Shape& shape, std::vector<std::vector<int64_t>> st) {
  const Reduction& red = kernel_.reduce;
  const size_t nside = kernel_.outputs.size();  // a full reduction's elementwise outputs, stored as it reads
  std::vector<Tensor> outputs;
  for (size_t o = 0; o < nside; ++o) {
    outputs.push_back(Tensor::empty(shape, kernel_.output_dtype(o)));
    st.push_back(contiguous_strides(shape));
  }
  const ReduceSpace rs = reduce_space(red, shape, st);
  outputs.push_back(Tensor::empty(rs.out_shape, red.dtype));
  if (rs.outer == 0) return outputs;
  const DType reg = kernel_.instrs[size_t(red.reg)].dtype;
  if (rs.count == 0) {
    NX_CHECK(red.kind == ReduceOp::Sum || red.kind == ReduceOp::Mean, name_, ": ", reduce_op_name(red.kind),
             " over a zero-size axis has no identity; reduce over non-empty axes");
    for (int64_t o = 0; o < rs.outer; ++o)
      store_reduced(outputs[nside], o, red, reg, is_floating(reg) ? Acc{0.0} : Acc{.i = 0}, 0);
    return outputs;
  }
  const int64_t n = rs.reduced.shape.back();
  for (size_t o = 0; o < nside; ++o)
    NX_ASSERT(n == 1 || rs.reduced.strides[inputs.size() + o].back() == 1, "side outputs are contiguous");
  Variant v = inner_access(rs.reduced, inputs.size(), n);
  v.fn = variant(v.access);
  const int64_t chunks = (n + kern::kChunk - 1) / kern::kChunk;
  const int64_t per_out = rs.count / n * chunks;
  const std::vector<Acc> partial =
      reduce_chunks(kernel_, v, rs, operands(inputs, {outputs.data(), nside}), consts, chunks, per_out);
  for (int64_t o = 0; o < rs.outer; ++o)
    store_reduced(outputs[nside], o, red, reg, combine(red, reg, &partial[size_t(o * per_out)], per_out), rs.count);
  return outputs;
}

std::vector<Tensor> Program::run_rows(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                      const Shape& shape, std::vector<std::vector<int64_t>> st) {
  const FusedKernel& k = kernel_;
  const Reduction& red = k.reduce;
  const size_t nin = inputs.size(), nside = k.outputs.size(), lead = red.axes.size();
  std::vector<Tensor> outputs;
  for (size_t o = 0; o < nside; ++o) {
    outputs.push_back(Tensor::empty(shape, k.output_dtype(o)));
    st.push_back(contiguous_strides(shape));
  }
  Shape out_shape(red.keepdims ? lead : 0, 1);
  out_shape.insert(out_shape.end(), shape.begin() + int64_t(lead), shape.end());
  outputs.push_back(Tensor::empty(out_shape, k.output_dtype(nside)));
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
    ReduceSpace rs;  // the leading dims are reduced, the rest kept
    rs.outer = cols;
    rs.count = rows;
    rs.reduced.strides.resize(st.size());
    rs.keep.strides.resize(st.size());
    merge_into(rs.reduced, shape, st, 0, lead);
    merge_into(rs.keep, shape, st, lead, shape.size());
    const int64_t n = rs.keep.shape.back();
    for (size_t o = 0; o < nside; ++o)
      NX_ASSERT(n == 1 || rs.keep.strides[nin + o].back() == 1, "side outputs are contiguous along the kept dims");
    Variant v = inner_access(rs.keep, nin, n);
    v.fn = variant(v.access);
    void* acc = dbl ? static_cast<void*>(acc_d.data()) : static_cast<void*>(acc_f.data());
    reduce_rows(k, v, rs, operands(inputs, {outputs.data(), nside}), consts, acc, dbl ? sizeof(double) : sizeof(float));
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
