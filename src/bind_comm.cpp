// Comm bindings (nexus._C.comm): codecs, Residual, and loopback_allreduce — N ranks as threads
// over the in-memory transport, the test surface of the ring (the MPI transport binds in _C_mpi).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "comm/loopback_allreduce.h"

namespace py = pybind11;

namespace nexus::python {
namespace {

using namespace nexus::comm;
using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;

RankBuffer to_rank_buffer(py::array& a) {
  NX_CHECK(a.ndim() == 1 && (a.flags() & py::array::c_style) && a.writeable(),
           "loopback_allreduce: each buffer must be a writeable contiguous 1-D array");
  const bool f64 = a.dtype().is(py::dtype::of<double>());
  NX_CHECK_TYPE(f64 || a.dtype().is(py::dtype::of<float>()),
                "loopback_allreduce: buffers must be float32 or float64, got ", std::string(py::str(a.dtype())));
  return {a.mutable_data(), f64 ? DType::Float64 : DType::Float32, size_t(a.size())};
}

// An `out=` array of a codec call: written in place, so it must be exactly what the call
// writes (a converted copy would silently drop the result).
void check_out(const py::array& out, const py::dtype& dtype, size_t min_size, const std::string& what) {
  NX_CHECK(
      out.dtype().is(dtype) && (out.flags() & py::array::c_style) && out.writeable() && size_t(out.size()) >= min_size,
      "Codec(\"", what, ": out must be a writeable contiguous ", std::string(py::str(dtype)), " array of at least ",
      min_size, " elements, got ", std::string(py::str(out.dtype())), " of ", out.size());
}

AllReduceOptions options(ReduceOp op, const std::string& compression, size_t segment_bytes, double timeout_s) {
  NX_CHECK(timeout_s > 0, "loopback_allreduce: timeout_s must be > 0, got ", timeout_s);
  return {op, make_codec(compression), nullptr, segment_bytes, Timeout(int64_t(timeout_s * 1000 + 0.5))};
}

}  // namespace

void bind_comm(py::module_& root) {
  py::module_ m = root.def_submodule("comm", "Ring all-reduce, codecs, error feedback");
  py::register_exception<CommError>(m, "CommError", PyExc_RuntimeError);
  m.attr("MAX_SEGMENT_BYTES") = kMaxSegmentBytes;
  m.attr("INT8_BLOCK") = kInt8Block;

  py::class_<Codec, std::shared_ptr<Codec>>(m, "Codec")
      .def(py::init([](const std::string& spec) { return std::const_pointer_cast<Codec>(make_codec(spec)); }),
           py::arg("spec"))
      .def_property_readonly("spec", &Codec::spec)
      .def_property_readonly("lossless", &Codec::lossless)
      .def("max_encoded_bytes", &Codec::max_encoded_bytes, py::arg("n"))
      .def(
          "encode",
          [](const Codec& c, Floats x, std::optional<py::array> out) -> py::object {
            const size_t n = size_t(x.size());
            if (!out) {
              std::vector<std::byte> v;
              {
                py::gil_scoped_release nogil;
                v = encode_to_vector(c, x.data(), n);
              }
              return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
            }
            check_out(*out, py::dtype::of<uint8_t>(), c.max_encoded_bytes(n), str(c.spec(), "\").encode"));
            auto* dst = reinterpret_cast<std::byte*>(out->mutable_data());
            size_t written = 0;
            {
              py::gil_scoped_release nogil;
              written = c.encode(x.data(), n, dst);
            }
            return py::int_(written);  // a Python object: made with the GIL held
          },
          py::arg("x"), py::arg("out") = py::none(),
          "Encodes float32 x: into new bytes, or into `out` (uint8) returning the bytes written")
      .def(
          "decode",
          [](const Codec& c, py::buffer data, size_t n, std::optional<py::array> out, bool accumulate) -> py::object {
            const py::buffer_info in = data.request();
            NX_CHECK(in.ndim <= 1 && (in.ndim == 0 || in.strides[0] == in.itemsize), "Codec(\"", c.spec(),
                     "\").decode: data must be contiguous bytes");
            const auto* src = static_cast<const std::byte*>(in.ptr);
            const size_t bytes = size_t(in.size * in.itemsize);
            if (!out) {
              NX_CHECK(!accumulate, "Codec.decode: accumulate=True needs an out array to add into");
              std::vector<float> v;
              {
                py::gil_scoped_release nogil;
                v = decode_to_vector(c, src, bytes, n);
              }
              return Floats(py::ssize_t(v.size()), v.data());
            }
            check_out(*out, py::dtype::of<float>(), n, str(c.spec(), "\").decode"));
            auto* dst = static_cast<float*>(out->mutable_data());
            {
              py::gil_scoped_release nogil;
              c.decode(src, bytes, dst, n, accumulate);
            }
            return std::move(*out);
          },
          py::arg("data"), py::arg("n"), py::arg("out") = py::none(), py::arg("accumulate") = false,
          "Decodes n float32 values: into a new array, or into (accumulate: added to) `out`");

  py::class_<Residual>(m, "Residual")
      .def(py::init<size_t>(), py::arg("n"))
      .def("__len__", &Residual::size)
      .def("reset", &Residual::reset)
      .def("numpy", [](const Residual& r) { return Floats(py::ssize_t(r.size()), r.data()); });

  py::class_<AllReduceStats>(m, "AllReduceStats")
      .def_readonly("bytes_sent", &AllReduceStats::bytes_sent)
      .def_readonly("bytes_uncompressed", &AllReduceStats::bytes_uncompressed)
      .def_readonly("seconds", &AllReduceStats::seconds)
      .def("__repr__", [](const AllReduceStats& s) {
        return str("AllReduceStats(bytes_sent=", s.bytes_sent, ", bytes_uncompressed=", s.bytes_uncompressed,
                   ", seconds=", s.seconds, ")");
      });

  m.def(
      "loopback_allreduce",
      [](std::vector<py::array> arrays, ReduceOp op, const std::string& compression, size_t segment_bytes,
         double timeout_s, const std::vector<Residual*>& residuals, const std::vector<int>& absent) {
        std::vector<RankBuffer> bufs;
        for (py::array& a : arrays) bufs.push_back(to_rank_buffer(a));
        auto opts = options(op, compression, segment_bytes, timeout_s);
        std::vector<AllReduceStats> stats;
        {
          py::gil_scoped_release nogil;
          stats = loopback_allreduce(bufs, opts, residuals, absent);
        }
        return py::make_tuple(arrays, stats);
      },
      py::arg("buffers"), py::arg("op") = "sum", py::arg("compression") = "none",
      py::arg("segment_bytes") = kMaxSegmentBytes, py::arg("timeout_s") = 60.0,
      py::arg("residuals") = std::vector<Residual*>{}, py::arg("absent") = std::vector<int>{});
}

}  // namespace nexus::python
