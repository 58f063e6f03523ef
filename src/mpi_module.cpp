// PYBIND11_MODULE(_C_mpi): the MPI transport and the collectives that run on it. Imported only by
// nexus.distributed, after mpi4py.MPI (which loads and initialises the MPI library this module
// links). Tensors, Codec, Residual and AllReduceStats are nexus._C's classes (pybind11 shares
// registered types between extensions built alike), so `import nexus` must come first.
#include <pybind11/stl.h>

#include "base/error.h"
#include "bindings.h"
#include "comm/data_parallel.h"
#include "comm/mpi/mpi_transport.h"
#include "tensor/tensor.h"

namespace py = pybind11;
using namespace nexus;
using namespace nexus::comm;

namespace {

AllReduceOptions options(ReduceOp op, const std::string& compression, Residual* residual, size_t segment_bytes,
                         double timeout_s) {
  NX_CHECK(timeout_s > 0, "all_reduce: timeout_s must be > 0, got ", timeout_s);
  return {op, make_codec(compression), residual, segment_bytes, Timeout(int64_t(timeout_s * 1000 + 0.5))};
}

}  // namespace

PYBIND11_MODULE(_C_mpi, m) {
  m.doc() = "Nexus MPI extension: the ring all-reduce over MPI point-to-point";
  py::module_ core = py::module_::import("nexus._C");  // Tensor, comm.Codec/Residual/...
  // The core's errors thrown here reach nexus._C's translator: both extensions load one
  // libnexus_core, so its error types are the same types here and there.
  auto nogil = py::call_guard<py::gil_scoped_release>();

  py::class_<MpiTransport>(m, "MpiTransport")
      .def(py::init<int64_t>(), py::arg("fortran_handle"), nogil)
      .def_property_readonly("rank", &MpiTransport::rank)
      .def_property_readonly("size", &MpiTransport::size);

  m.def(
      "all_reduce",
      [](MpiTransport& t, const Tensor& x, ReduceOp op, const std::string& compression, Residual* residual,
         size_t segment_bytes, double timeout_s) {
        NX_CHECK(x.defined() && (x.numel() == 0 || x.is_contiguous()),
                 "all_reduce: the tensor must be contiguous (t.contiguous())");
        auto opts = options(op, compression, residual, segment_bytes, timeout_s);
        py::gil_scoped_release nogil;
        return ring_allreduce(t, x.raw_data(), x.dtype(), size_t(x.numel()), opts);
      },
      py::arg("comm"), py::arg("x"), py::arg("op") = "sum", py::arg("compression") = "none",
      py::arg("residual") = nullptr, py::arg("segment_bytes") = kMaxSegmentBytes, py::arg("timeout_s") = 300.0);

  // The whole gradient side of a data-parallel step: CompiledModel.train_step (nexus._C) takes
  // it as its reducer. It keeps the communicators it reduces over alive.
  py::class_<DataParallelReducer, engine::GradReducer, std::shared_ptr<DataParallelReducer>>(m, "DataParallelReducer")
      .def(py::init([](MpiTransport& world, const std::vector<Tensor>& params, size_t bucket_bytes,
                       const std::string& compression, const std::string& leader_compression, bool overlap,
                       MpiTransport* group, MpiTransport* cross, bool sharded, size_t segment_bytes, double timeout_s,
                       bool shared_memory, Device device, bool device_collective) {
             const AllReduceOptions o = options(ReduceOp::Sum, compression, nullptr, segment_bytes, timeout_s);
             DataParallelOptions opts{bucket_bytes,     o.codec,       make_codec(leader_compression),
                                      sharded,          overlap,       segment_bytes,
                                      o.timeout,        shared_memory, device,
                                      device_collective};
             py::gil_scoped_release nogil;  // a collective handshake: other ranks' Python may need the GIL
             return std::make_shared<DataParallelReducer>(world, params, std::move(opts), group, cross);
           }),
           py::arg("world"), py::arg("params"), py::arg("bucket_bytes") = kDefaultBucketBytes,
           py::arg("compression") = "none", py::arg("leader_compression") = "none", py::arg("overlap") = true,
           py::arg("group") = nullptr, py::arg("cross") = nullptr, py::arg("sharded") = false,
           py::arg("segment_bytes") = kMaxSegmentBytes, py::arg("timeout_s") = 300.0, py::arg("shared_memory") = true,
           py::arg("device") = Device::cpu(), py::arg("device_collective") = true, py::keep_alive<1, 2>(),
           py::keep_alive<1, 8>(), py::keep_alive<1, 9>())
      .def_property_readonly("num_buckets", &DataParallelReducer::num_buckets)
      .def_property_readonly("shared_memory", &DataParallelReducer::shared_memory)
      .def_property_readonly("reduces_on_device", &DataParallelReducer::reduces_on_device)
      .def_property_readonly("last_step_shared", &DataParallelReducer::last_step_shared)
      .def_property_readonly("last_samples", &DataParallelReducer::last_samples)
      .def_property_readonly("busy_seconds", &DataParallelReducer::busy_seconds)
      .def_property_readonly("cpu_seconds", &DataParallelReducer::cpu_seconds)
      .def_property_readonly("last_stats", &DataParallelReducer::last_stats)
      .def_property_readonly("last_phases", [](const DataParallelReducer& r) {
        const auto& p = r.last_phases();
        return py::make_tuple(p.backward, p.reduction, p.counts);
      });

  // One hierarchical reduction of one buffer (HierarchicalReducer, one bucket): what
  // DataParallel does with groups, on its own for benchmarks/allreduce.py and the MPI tests.
  m.def(
      "hierarchical_all_reduce",
      [](MpiTransport& group, MpiTransport* cross, bool sharded, const Tensor& x, const std::string& compression,
         const std::string& cross_compression, size_t segment_bytes, double timeout_s) {
        NX_CHECK(x.defined() && (x.numel() == 0 || x.is_contiguous()),
                 "hierarchical_all_reduce: the tensor must be contiguous (t.contiguous())");
        const AllReduceOptions o = options(ReduceOp::Sum, compression, nullptr, segment_bytes, timeout_s);
        py::gil_scoped_release nogil;
        const size_t bytes = std::max<size_t>(1, size_t(x.numel()) * size_t(itemsize(x.dtype())));
        BucketReducer buckets({x}, bytes, o.codec);
        HierarchicalReducer hier(group, cross, sharded, {x}, bytes, make_codec(cross_compression));
        const AllReduceStats s = hier.reduce(buckets, {x}, 1.0, o);
        return std::make_tuple(s, hier.last_cross_bytes());
      },
      py::arg("group"), py::arg("cross"), py::arg("sharded"), py::arg("x"), py::arg("compression") = "none",
      py::arg("cross_compression") = "none", py::arg("segment_bytes") = kMaxSegmentBytes, py::arg("timeout_s") = 300.0);

  m.attr("DEFAULT_BUCKET_BYTES") = kDefaultBucketBytes;
  m.def("library_version", &mpi_library_version);
  m.def("abort", &mpi_abort, py::arg("code") = 1);
}
