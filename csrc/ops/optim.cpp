// Optimizer front end: validates hyperparameters and tensors, creates per-parameter buffers
// lazily, turns hyperparameters into per-parameter coefficients and runs one fused kernel over
// all parameters. Every check runs before anything is written, so a failed step changes nothing.
#include "ops/optim.h"

#include <cmath>
#include <cstring>
#include <string>

#include "base/error.h"
#include "device/backend.h"
#include "ops/dispatch.h"
#include "ops/cpu/kernels.h"
#include "ops/ops.h"
#include "tensor/tape.h"

namespace nexus::ops::optim {
namespace {

using Kind = Config::Kind;

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::SGD: return "SGD";
    case Kind::Adam: return "Adam";
    case Kind::AdamW: return "AdamW";
  }
  return "optimizer";
}

// The gradients with undefined ones kept undefined and the rest made contiguous; checks dtypes.
std::vector<Tensor> contiguous_grads(const std::vector<Tensor>& grads, const char* op) {
  std::vector<Tensor> out(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    DType t = grads[i].dtype();
    NX_CHECK_TYPE(t == DType::Float32 || t == DType::Float64, op, ": gradient ", i, " has dtype ", dtype_name(t),
                  "; expected float32 or float64");
    out[i] = contiguous(grads[i]);
  }
  return out;
}

std::vector<cpu::OptimSegment> grad_segments(const std::vector<Tensor>& grads) {
  std::vector<cpu::OptimSegment> segs;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    cpu::OptimSegment s;
    s.dtype = g.dtype();
    s.numel = g.numel();
    s.grad = g.raw_data();
    segs.push_back(s);
  }
  return segs;
}

void check_param(const Tensor& p, const Tensor& g, size_t i, const Config& c) {
  const char* op = kind_name(c.kind);
  NX_CHECK(p.defined(), op, ": parameter ", i, " is undefined");
  common_device(op, {p, g});
  DType t = p.dtype();
  NX_CHECK_TYPE(t == DType::Float32 || t == DType::Float64, op, ": parameter ", i, " has dtype ", dtype_name(t),
                "; optimizers update float32 or float64 parameters");
  NX_CHECK(p.is_contiguous(), op, ": parameter ", i, " of shape ", shape_str(p.shape()),
           " is not contiguous; parameters are updated in place and need contiguous storage");
  if (!g.defined()) return;
  NX_CHECK(g.shape() == p.shape(), op, ": gradient ", i, " has shape ", shape_str(g.shape()),
           " but its parameter has shape ", shape_str(p.shape()));
  NX_CHECK_TYPE(g.dtype() == t, op, ": gradient ", i, " has dtype ", dtype_name(g.dtype()),
                " but its parameter has dtype ", dtype_name(t));
}

// A buffer restored from a checkpoint must fit its parameter.
void check_buffer(const Tensor& buf, const Tensor& p, size_t i, const char* name, Kind k) {
  if (!buf.defined()) return;
  NX_CHECK(buf.shape() == p.shape() && buf.dtype() == p.dtype() && buf.is_contiguous(), kind_name(k), ": state buffer ",
           name, "[", i, "] has shape ", shape_str(buf.shape()), " and dtype ", dtype_name(buf.dtype()),
           "; its parameter has shape ", shape_str(p.shape()), " and dtype ", dtype_name(p.dtype()));
}

void check_state(const Config& c, const std::vector<Tensor>& params, State& s) {
  size_t n = params.size();
  if (s.param_steps.empty() && s.m.empty() && s.v.empty()) {  // a fresh state
    s.param_steps.assign(n, 0);
    s.m.resize(n);
    s.v.resize(n);
  }
  NX_CHECK(s.param_steps.size() == n && s.m.size() == n && s.v.size() == n, kind_name(c.kind),
           ": the optimizer state holds ", s.param_steps.size(), " parameters but ", n,
           " were passed; a state belongs to one parameter list");
  for (size_t i = 0; i < n; ++i) {
    check_buffer(s.m[i], params[i], i, "m", c.kind);
    check_buffer(s.v[i], params[i], i, "v", c.kind);
  }
}

Tensor& lazy_zeros(Tensor& buf, const Tensor& like) {
  if (!buf.defined()) buf = Tensor::zeros(like.shape(), like.dtype(), like.device());
  return buf;
}

// The update of parameters on one device (the host's loops, or the device's kernels).
void run_sgd(const Config& c, double lr, double scale, const std::vector<Tensor>& params,
             const std::vector<Tensor>& grads, State& s, Device device) {
  bool use_momentum = c.momentum != 0;
  std::vector<cpu::OptimSegment> segs;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    cpu::OptimSegment seg{params[i].dtype(), params[i].numel(), params[i].raw_data(), grads[i].raw_data()};
    if (use_momentum) {
      bool first = !s.m[i].defined();  // torch: the first buffer is a copy of the gradient
      seg.m = lazy_zeros(s.m[i], params[i]).raw_data();
      seg.buf_keep = first ? 0.0 : c.momentum;
      seg.buf_add = first ? 1.0 : 1.0 - c.dampening;
    }
    segs.push_back(seg);
  }
  const cpu::SgdCoeffs coeffs{lr, scale, c.weight_decay, c.momentum, use_momentum, c.nesterov};
  if (device.is_cpu()) cpu::kernels().sgd(segs, coeffs);
  else device::backend(device).sgd_update(device.index, segs, coeffs);
}

void run_adam(const Config& c, double lr, double scale, const std::vector<Tensor>& params,
              const std::vector<Tensor>& grads, State& s, Device device) {
  std::vector<cpu::OptimSegment> segs;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    double t = double(s.param_steps[i] + 1);
    cpu::OptimSegment seg{params[i].dtype(),
                          params[i].numel(),
                          params[i].raw_data(),
                          grads[i].raw_data(),
                          lazy_zeros(s.m[i], params[i]).raw_data(),
                          lazy_zeros(s.v[i], params[i]).raw_data()};
    seg.step_size = lr / (1.0 - std::pow(c.beta1, t));
    seg.bias2_sqrt = std::sqrt(1.0 - std::pow(c.beta2, t));
    segs.push_back(seg);
  }
  bool decoupled = c.kind == Kind::AdamW;
  const cpu::AdamCoeffs coeffs{scale,
                               decoupled ? 0.0 : c.weight_decay,
                               decoupled ? 1.0 - lr * c.weight_decay : 1.0,
                               1.0 - c.beta1,
                               c.beta2,
                               1.0 - c.beta2,
                               c.eps};
  if (device.is_cpu()) cpu::kernels().adam(segs, coeffs);
  else device::backend(device).adam_update(device.index, segs, coeffs);
}

}  // namespace

void validate(const Config& c, double lr) {
  const char* op = kind_name(c.kind);
  NX_CHECK(lr >= 0 && std::isfinite(lr), op, ": lr must be a finite number >= 0, got ", lr);
  NX_CHECK(c.weight_decay >= 0 && std::isfinite(c.weight_decay), op,
           ": weight_decay must be a finite number >= 0, got ", c.weight_decay);
  NX_CHECK(c.clip_norm >= 0, op, ": clip_norm must be > 0 (or 0 for no clipping), got ", c.clip_norm);
  if (c.kind == Kind::SGD) {
    NX_CHECK(c.momentum >= 0 && std::isfinite(c.momentum), op, ": momentum must be a finite number >= 0, got ",
             c.momentum);
    NX_CHECK(std::isfinite(c.dampening), op, ": dampening must be finite, got ", c.dampening);
    NX_CHECK(!c.nesterov || (c.momentum > 0 && c.dampening == 0), op,
             ": nesterov momentum requires momentum > 0 and dampening == 0, got momentum=", c.momentum,
             ", dampening=", c.dampening);
    return;
  }
  NX_CHECK(c.beta1 >= 0 && c.beta1 < 1, op, ": beta1 must be in [0, 1), got ", c.beta1);
  NX_CHECK(c.beta2 >= 0 && c.beta2 < 1, op, ": beta2 must be in [0, 1), got ", c.beta2);
  NX_CHECK(c.eps > 0 && std::isfinite(c.eps), op, ": eps must be a finite number > 0, got ", c.eps);
}

// torch's 1e-6 in clip_grad_norm_. A NaN norm gives a NaN scale, an infinite one a zero scale,
// as in PyTorch (the gradients then carry the problem instead of hiding it).
double clip_scale(double norm, double max_norm) {
  double coef = max_norm / (norm + 1e-6);
  return coef >= 1.0 ? 1.0 : coef;
}

double sum_squares(const std::vector<Tensor>& grads) {
  for (const Tensor& t : grads)
    if (t.defined() && !t.device().is_cpu()) {  // on a device: a float64 sum of squares there
      autograd::NoGradGuard no_grad;
      double total = 0;
      for (const Tensor& x : grads) {
        if (!x.defined()) continue;
        Tensor x64 = astype(x, DType::Float64);
        total += to_device(sum(mul(x64, x64), {}, false), Device::cpu()).data<double>()[0];
      }
      return total;
    }
  std::vector<Tensor> g = contiguous_grads(grads, "global_grad_norm");
  return cpu::kernels().sum_squares(grad_segments(g));
}

double global_grad_norm(const std::vector<Tensor>& grads) { return std::sqrt(sum_squares(grads)); }

void scale_(const std::vector<Tensor>& grads, double factor) {
  bool on_host = true;
  for (size_t i = 0; i < grads.size(); ++i) {
    NX_CHECK(!grads[i].defined() || grads[i].is_contiguous(), "scale_: gradient ", i,
             " is not contiguous; it is scaled in place");
    on_host = on_host && (!grads[i].defined() || grads[i].device().is_cpu());
  }
  if (on_host) {
    cpu::kernels().scale_grads(grad_segments(grads), factor);
    return;
  }
  autograd::NoGradGuard no_grad;
  for (const Tensor& g : grads)
    if (g.defined()) copy_(g, mul_scalar(g, factor));
}

double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm) {
  NX_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  for (size_t i = 0; i < grads.size(); ++i)
    NX_CHECK(!grads[i].defined() || grads[i].is_contiguous(), "clip_grad_norm: gradient ", i,
             " is not contiguous; it is scaled in place");
  const double norm = global_grad_norm(grads);
  const double scale = clip_scale(norm, max_norm);
  if (scale != 1.0) scale_(grads, scale);
  return norm;
}

void move_to_own_memory(const Tensor& p) {
  NX_ASSERT(p.device().is_cpu());
  auto own = std::make_shared<Storage>(p.storage()->nbytes());
  std::memcpy(own->data(), p.storage()->data(), p.storage()->nbytes());
  p.rebind(std::move(own), p.offset());
}

void step(const Config& c, double lr, const std::vector<Tensor>& params, const std::vector<Tensor>& grads, State& s) {
  validate(c, lr);
  NX_CHECK(grads.size() == params.size(), kind_name(c.kind), ": got ", params.size(), " parameters but ", grads.size(),
           " gradients; pass one (or None) per parameter");
  for (size_t i = 0; i < params.size(); ++i) check_param(params[i], grads[i], i, c);
  // One device per optimizer: its update is one set of kernels there.
  const Device device = params.empty() ? Device::cpu() : params[0].device();
  for (size_t i = 0; i < params.size(); ++i)
    NX_CHECK(params[i].device() == device, kind_name(c.kind), ": parameter ", i, " is on ", params[i].device().str(),
             " but parameter 0 on ", device.str(), "; an optimizer updates the parameters of one device");
  check_state(c, params, s);
  // Parameters in a data-parallel segment (Storage::shared) are the other ranks' too: this update
  // moves them to memory of their own first (their values unchanged), and leaves the others alone.
  for (const Tensor& p : params)
    if (p.storage()->shared()) move_to_own_memory(p);
  for (size_t i = 0; i < params.size(); ++i)  // a model moved to another device takes its moments along
    for (Tensor* buf : {&s.m[i], &s.v[i]}) {
      if (buf->defined() && buf->device() != params[i].device()) *buf = to_device(*buf, params[i].device());
      // Moments left in a data-parallel segment (Storage::shared): this update's are its own.
      if (buf->defined() && buf->storage()->shared()) *buf = contiguous(*buf, /*force_copy=*/true);
    }
  std::vector<Tensor> g = contiguous_grads(grads, kind_name(c.kind));
  double scale = c.clip_norm > 0 ? clip_scale(global_grad_norm(g), c.clip_norm) : 1.0;

  if (c.kind == Kind::SGD) run_sgd(c, lr, scale, params, g, s, device);
  else run_adam(c, lr, scale, params, g, s, device);
  for (size_t i = 0; i < params.size(); ++i) s.param_steps[i] += g[i].defined() ? 1 : 0;
  ++s.step;
}

}  // namespace nexus::ops::optim
