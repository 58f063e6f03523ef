// Zero-copy exchange with numpy (buffer protocol, array views) and DLPack (CPU, legacy capsule).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "base/checked.h"
#include "bindings.h"
#include "ops/ops.h"

namespace py = pybind11;

namespace nexus::python {
namespace {

// ---- DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html), the unversioned structs ----
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
constexpr int32_t kDLCPU = 1;
enum : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

DLDataType to_dl(DType t) {
  switch (t) {
    case DType::Float32: return {kDLFloat, 32, 1};
    case DType::Float64: return {kDLFloat, 64, 1};
    case DType::Float16: return {kDLFloat, 16, 1};
    case DType::BFloat16: return {kDLBfloat, 16, 1};
    case DType::Int32: return {kDLInt, 32, 1};
    case DType::Int64: return {kDLInt, 64, 1};
    case DType::Bool: return {kDLBool, 8, 1};
  }
  return {};
}

DType from_dl(DLDataType d) {
  NX_CHECK_TYPE(d.lanes == 1, "from_dlpack: vector dtypes (lanes=", d.lanes, ") are not supported");
  if (d.code == kDLFloat && d.bits == 32) return DType::Float32;
  if (d.code == kDLFloat && d.bits == 64) return DType::Float64;
  if (d.code == kDLFloat && d.bits == 16) return DType::Float16;
  if (d.code == kDLBfloat && d.bits == 16) return DType::BFloat16;
  if (d.code == kDLInt && d.bits == 32) return DType::Int32;
  if (d.code == kDLInt && d.bits == 64) return DType::Int64;
  if (d.code == kDLBool && d.bits == 8) return DType::Bool;
  throw TypeError(str("from_dlpack: unsupported dtype (code ", int(d.code), ", bits ", int(d.bits),
                      "); supported: float16/32/64, bfloat16, int32, int64, bool"));
}

// What an export holds: the storage its pointer is into (a tensor may move to another storage
// meanwhile, Tensor::rebind), not the tensor.
struct ExportCtx {
  std::shared_ptr<Storage> storage;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed;
};

py::capsule to_dlpack(const Tensor& t) {
  auto* ctx = new ExportCtx{t.storage(), t.shape(), t.strides(), {}};
  DLTensor& d = ctx->managed.dl_tensor;
  d.data = t.raw_data();
  d.device = {kDLCPU, 0};
  d.ndim = int32_t(t.ndim());
  d.dtype = to_dl(t.dtype());
  d.shape = ctx->shape.data();
  d.strides = ctx->strides.data();
  d.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* m) { delete static_cast<ExportCtx*>(m->manager_ctx); };
  return py::capsule(&ctx->managed, "dltensor", [](PyObject* cap) {
    // Still named "dltensor": nobody consumed it, so we own it.
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      m->deleter(m);
    }
  });
}

Tensor from_dlpack_capsule(py::capsule cap) {
  NX_CHECK_TYPE(PyCapsule_IsValid(cap.ptr(), "dltensor"), "from_dlpack: expected an unconsumed 'dltensor' capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  const DLTensor& d = m->dl_tensor;
  NX_CHECK_TYPE(d.device.device_type == kDLCPU, "from_dlpack: only CPU tensors are supported, got device type ",
                d.device.device_type);
  DType dt = from_dl(d.dtype);
  Shape shape(d.shape, d.shape + d.ndim);
  Strides strides = d.strides ? Strides(d.strides, d.strides + d.ndim) : contiguous_strides(shape);
  int64_t extent = 1;
  for (int i = 0; i < d.ndim; ++i) {
    NX_CHECK(strides[i] >= 0, "from_dlpack: negative strides are not supported");
    if (shape[i] == 0) extent = 0;
    else if (extent) extent += (shape[i] - 1) * strides[i];
  }
  void* base = static_cast<char*>(d.data) + d.byte_offset;
  auto storage = std::make_shared<Storage>(base, size_t(extent * itemsize(dt)), [m](void*) {
    py::gil_scoped_acquire gil;
    if (m->deleter) m->deleter(m);
  });
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  return Tensor::view_of(storage, 0, shape, strides, dt);
}

// ---- numpy ----
py::dtype to_numpy_dtype(DType t) {
  switch (t) {
    case DType::Float32: return py::dtype::of<float>();
    case DType::Float64: return py::dtype::of<double>();
    case DType::Float16: return py::dtype("float16");
    case DType::Int32: return py::dtype::of<int32_t>();
    case DType::Int64: return py::dtype::of<int64_t>();
    case DType::Bool: return py::dtype::of<bool>();
    case DType::BFloat16: break;
  }
  throw TypeError("numpy has no bfloat16 dtype; convert first with t.astype(nx.float32)");
}

DType from_numpy_dtype(const py::dtype& d) {
  char kind = d.kind();
  auto size = d.itemsize();
  if (kind == 'f' && size == 4) return DType::Float32;
  if (kind == 'f' && size == 8) return DType::Float64;
  if (kind == 'f' && size == 2) return DType::Float16;
  if (kind == 'i' && size == 4) return DType::Int32;
  if (kind == 'i' && size == 8) return DType::Int64;
  if (kind == 'b') return DType::Bool;
  throw TypeError(str("numpy dtype ", std::string(py::str(d)),
                      " is not supported; supported: float16, "
                      "float32, float64, int32, int64, bool"));
}

Tensor from_numpy(py::array a) {
  DType dt = from_numpy_dtype(a.dtype());
  Shape shape(a.shape(), a.shape() + a.ndim());
  Strides strides(size_t(a.ndim()));
  int64_t extent = 1;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    NX_CHECK(a.strides(i) >= 0 && a.strides(i) % itemsize(dt) == 0, "from_numpy: array strides ",
             shape_str(Shape(a.strides(), a.strides() + a.ndim())),
             " are negative or not a multiple of the itemsize; pass np.ascontiguousarray(a)");
    strides[i] = a.strides(i) / itemsize(dt);
    if (shape[i] == 0) extent = 0;
    else if (extent) extent += (shape[i] - 1) * strides[i];
  }
  auto* keep = new py::object(a);
  auto storage = std::make_shared<Storage>(const_cast<void*>(a.data()), size_t(extent * itemsize(dt)), [keep](void*) {
    py::gil_scoped_acquire gil;
    delete keep;
  });
  return Tensor::view_of(storage, 0, shape, strides, dt);
}

// Strides in bytes. A stride past int64 in bytes addresses nothing: it belongs to an axis of
// extent 1 (a slice with a huge step) or to an empty tensor (a dim of 2^62 beside a 0), so it is
// 0 there (numpy then judges the shape).
std::vector<py::ssize_t> byte_strides(const Tensor& t) {
  std::vector<py::ssize_t> s;
  for (int64_t d = 0; d < t.ndim(); ++d) {
    int64_t bytes = 0;
    if (!checked_mul(t.strides()[size_t(d)], itemsize(t.dtype()), &bytes)) {
      NX_ASSERT(t.numel() == 0 || t.dim(d) == 1, "byte stride overflow in a tensor of shape ", shape_str(t.shape()));
      bytes = 0;
    }
    s.push_back(bytes);
  }
  return s;
}

}  // namespace

// Off in the thread that nx.jit traces in: data read through the buffer protocol (np.asarray)
// would be frozen into the trace. numpy then falls back to __array__, which the tracer refuses.
static thread_local bool t_buffer_exports = true;

// numpy and DLPack's CPU capsule read host memory: a device tensor is copied with .cpu() first.
static void check_host(const Tensor& t, const char* what) {
  NX_CHECK_TYPE(t.device().is_cpu(), "can't convert a ", t.device().str(), " tensor to ", what,
                "; copy it to the host first with .cpu()");
}

// A buffer (memoryview, np.asarray) holds the storage it points into as well as the tensor: the
// tensor may move to another storage while the buffer lives (Tensor::rebind). pybind11 fills the
// view; these wrap its slots to keep the storage beside what it keeps in view->internal.
static getbufferproc g_fill_buffer = nullptr;
static releasebufferproc g_release_buffer = nullptr;

namespace {

struct HeldBuffer {
  void* internal;  // pybind11's
  std::shared_ptr<Storage> storage;
};

int get_buffer_holding_storage(PyObject* obj, Py_buffer* view, int flags) {
  if (g_fill_buffer(obj, view, flags) != 0) return -1;
  view->internal = new HeldBuffer{view->internal, py::handle(obj).cast<const Tensor&>().storage()};
  return 0;
}

void release_buffer_holding_storage(PyObject* obj, Py_buffer* view) {
  auto* held = static_cast<HeldBuffer*>(view->internal);
  view->internal = held->internal;
  delete held;
  if (g_release_buffer) g_release_buffer(obj, view);
}

}  // namespace

void bind_buffer(py::module_& m, py::class_<Tensor>& tensor) {
  auto* type = reinterpret_cast<PyHeapTypeObject*>(tensor.ptr());
  g_fill_buffer = type->as_buffer.bf_getbuffer;
  g_release_buffer = type->as_buffer.bf_releasebuffer;
  NX_ASSERT(g_fill_buffer != nullptr && type->ht_type.tp_as_buffer == &type->as_buffer);
  type->as_buffer.bf_getbuffer = get_buffer_holding_storage;
  type->as_buffer.bf_releasebuffer = release_buffer_holding_storage;
  tensor.def_buffer([](const Tensor& t) {
    NX_CHECK_TYPE(t_buffer_exports, "nx.jit: the buffer protocol on a tensor while tracing");
    check_host(t, "a buffer");
    return py::buffer_info(t.raw_data(), itemsize(t.dtype()),
                           py::str(to_numpy_dtype(t.dtype()).attr("char")).cast<std::string>(), t.ndim(), t.shape(),
                           byte_strides(t));
  });
  tensor.def("numpy", [](py::object self) {
    const Tensor& t = self.cast<const Tensor&>();
    check_host(t, "numpy");
    // The array keeps the storage alive, not the tensor, which may move to another (rebind).
    auto* keep = new std::shared_ptr<Storage>(t.storage());
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
    return py::array(to_numpy_dtype(t.dtype()), t.shape(), byte_strides(t), t.raw_data(), owner);
  });
  // np.asarray(t) where the buffer protocol is refused (a device tensor; a trace): without this,
  // numpy would fall back to reading the tensor as a sequence, element by element.
  tensor.def(
      "__array__",
      [](py::object self, py::object dtype, py::object /*copy*/) {
        py::object arr = self.attr("numpy")();
        return dtype.is_none() ? arr : arr.attr("astype")(dtype);
      },
      py::arg("dtype") = py::none(), py::arg("copy") = py::none());
  tensor.def(
      "__dlpack__",
      [](const Tensor& t, py::object stream, py::object max_version, py::object dl_device, py::object copy) {
        check_host(t, "a DLPack capsule");
        return to_dlpack(t);
      },
      py::arg("stream") = py::none(), py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
      py::arg("copy") = py::none());
  tensor.def("__dlpack_device__", [](const Tensor&) { return py::make_tuple(kDLCPU, 0); });
  m.def("set_buffer_exports", [](bool on) { return std::exchange(t_buffer_exports, on); }, py::arg("on"));
  m.def("from_numpy", &from_numpy);
  m.def("from_dlpack_capsule", &from_dlpack_capsule);
}

}  // namespace nexus::python
