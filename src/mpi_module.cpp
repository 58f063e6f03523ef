// PYBIND11_MODULE(_C_mpi): the MPI transport and the collectives that run on it. Imported only by
// nexus.distributed, after mpi4py.MPI (which loads and initialises the MPI library this module
// links). Tensors, Codec, Residual and AllReduceStats are nexus._C's classes (pybind11 shares
// registered types between extensions built alike), so `import nexus` must come first.
#include <pybind11/stl.h>

#include "base/error.h"
#include "bindings.h"
#include "grad_ready_hook.h"
#include "comm/bucket.h"
#include "comm/overlap.h"
#include "comm/mpi/mpi_transport.h"
#include "tensor/tensor.h"

namespace py = pybind11;
using namespace nexus;
using namespace nexus::comm;

namespace {

// The Python face of OverlapReduction: the C hook CompiledModel.forward_backward calls (handed
// over as a capsule) forwards to ready().
struct OverlapBinding {
  OverlapReduction reduction;
  python::GradReadyHook hook{&OverlapBinding::on_ready, this};

  OverlapBinding(BucketReducer& r, Transport& t, double pre, AllReduceOptions opts)
      : reduction(r, t, pre, std::move(opts)) {}
  static void on_ready(void* self, size_t param, void* data, int64_t numel) {
    auto& o = static_cast<OverlapBinding*>(self)->reduction;
    if (param < o.num_params() && size_t(numel) == o.numel(param)) o.ready(param, data);
  }
};

AllReduceOptions options(ReduceOp op, const std::string& codec, Residual* residual,
                         size_t segment_bytes, double timeout_s) {
  NX_CHECK(timeout_s > 0, "all_reduce: timeout_s must be > 0, got ", timeout_s);
  return {op, make_codec(codec), residual, segment_bytes,
          Timeout(int64_t(timeout_s * 1000 + 0.5))};
}

}  // namespace

PYBIND11_MODULE(_C_mpi, m) {
  m.doc() = "Nexus MPI extension: the ring all-reduce over MPI point-to-point";
  py::module_ core = py::module_::import("nexus._C");  // Tensor, comm.Codec/Residual/...
  // The core's errors thrown here reach nexus._C's translator: both extensions load one
  // libnexus_core, so its error types are the same types here and there.
  auto nogil = py::call_guard<py::gil_scoped_release>();

  py::class_<MpiTransport>(m, "Communicator")
      .def(py::init<int64_t>(), py::arg("fortran_handle"), nogil)
      .def_property_readonly("rank", &MpiTransport::rank)
      .def_property_readonly("size", &MpiTransport::size);

  m.def("all_reduce", [](MpiTransport& t, const Tensor& x, ReduceOp op,
                         const std::string& codec, Residual* residual, size_t segment_bytes,
                         double timeout_s) {
    NX_CHECK(x.defined() && (x.numel() == 0 || x.is_contiguous()),
             "all_reduce: the tensor must be contiguous (t.contiguous())");
    auto opts = options(op, codec, residual, segment_bytes, timeout_s);
    py::gil_scoped_release nogil;
    return ring_allreduce(t, x.raw_data(), x.dtype(), size_t(x.numel()), opts);
  }, py::arg("comm"), py::arg("x"), py::arg("op") = "sum", py::arg("codec") = "none",
     py::arg("residual") = nullptr, py::arg("segment_bytes") = kMaxSegmentBytes,
     py::arg("timeout_s") = 300.0);

  py::class_<BucketReducer>(m, "BucketReducer")
      .def(py::init([](const std::vector<Tensor>& params, size_t bucket_bytes,
                       const std::string& codec) {
        return BucketReducer(params, bucket_bytes, make_codec(codec));
      }), py::arg("params"), py::arg("bucket_bytes") = kDefaultBucketBytes,
         py::arg("codec") = "none")
      .def_property_readonly("num_buckets", [](const BucketReducer& b) { return b.buckets().size(); })
      .def("reset_residuals", &BucketReducer::reset_residuals)
      .def("reduce", [](BucketReducer& b, MpiTransport& t, const std::vector<Tensor>& grads,
                        double pre_scale, double post_scale, size_t segment_bytes,
                        double timeout_s) {
        auto opts = options(ReduceOp::Sum, "none", nullptr, segment_bytes, timeout_s);
        return b.reduce(t, grads, pre_scale, post_scale, opts);
      }, py::arg("comm"), py::arg("grads"), py::arg("pre_scale") = 1.0,
         py::arg("post_scale") = 1.0, py::arg("segment_bytes") = kMaxSegmentBytes,
         py::arg("timeout_s") = 300.0, nogil);

  py::class_<OverlapBinding>(m, "OverlapReduction")
      .def(py::init([](BucketReducer& r, MpiTransport& t, double pre_scale, size_t segment_bytes,
                       double timeout_s) {
        return std::make_unique<OverlapBinding>(
            r, t, pre_scale, options(ReduceOp::Sum, "none", nullptr, segment_bytes, timeout_s));
      }), py::arg("reducer"), py::arg("comm"), py::arg("pre_scale") = 1.0,
         py::arg("segment_bytes") = kMaxSegmentBytes, py::arg("timeout_s") = 300.0,
         py::keep_alive<1, 2>(), py::keep_alive<1, 3>())
      // The capsule points into this object: keep the object alive while backward may call it.
      .def("hook", [](OverlapBinding& o) {
        return py::capsule(&o.hook, python::kGradReadyCapsule);
      })
      .def("finish", [](OverlapBinding& o, const std::vector<Tensor>& grads) {
        return o.reduction.finish(grads);
      }, py::arg("grads"), nogil);

  m.attr("DEFAULT_BUCKET_BYTES") = kDefaultBucketBytes;
  m.def("library_version", &mpi_library_version);
  m.def("abort", &mpi_abort, py::arg("code") = 1);
}
