// PYBIND11_MODULE(_C_mpi): the MPI transport and the collectives that run on it. Imported only by
// nexus.distributed, after mpi4py.MPI (which loads and initialises the MPI library this module
// links). Tensors, Codec, Residual and AllReduceStats are nexus._C's classes (pybind11 shares
// registered types between extensions built alike), so `import nexus` must come first.
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "grad_ready_hook.h"
#include "comm/bucket.h"
#include "comm/mpi/mpi_transport.h"
#include "tensor/tensor.h"

namespace py = pybind11;
using namespace nexus;
using namespace nexus::comm;

namespace {

// Reduces a BucketReducer's buckets on a worker thread while backward still runs: backward
// reports each gradient as it becomes final (the hook), and the worker takes the buckets from
// the last to the first (the order backward finishes them), each once all of its gradients are
// in. Every rank takes them in that same fixed order, so the rings match. finish() hands over
// any gradient the hook did not report, waits for the worker and returns the bytes and time.
class OverlapReduction {
 public:
  OverlapReduction(BucketReducer& reducer, MpiTransport& transport, double pre_scale,
                   AllReduceOptions opts)
      : reducer_(reducer), transport_(transport), pre_(pre_scale), opts_(std::move(opts)),
        data_(reducer.num_params(), nullptr), in_(reducer.buckets().size(), 0),
        bucket_of_(reducer.num_params(), 0) {
    const auto& buckets = reducer_.buckets();
    for (size_t b = 0; b < buckets.size(); ++b)
      for (size_t i = buckets[b].first; i < buckets[b].last; ++i) bucket_of_[i] = b;
    hook_ = {&OverlapReduction::on_ready, this};
    start_ = std::chrono::steady_clock::now();
    worker_ = std::thread([this] { work(); });
  }
  OverlapReduction(const OverlapReduction&) = delete;
  OverlapReduction& operator=(const OverlapReduction&) = delete;
  ~OverlapReduction() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abort_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  python::GradReadyHook* hook() { return &hook_; }

  AllReduceStats finish(const std::vector<Tensor>& grads) {
    NX_CHECK(grads.size() == data_.size(), "OverlapReduction.finish: ", grads.size(),
             " gradients for ", data_.size(), " parameters");
    for (size_t i = 0; i < grads.size(); ++i) {
      NX_CHECK(grads[i].defined() && (grads[i].numel() == 0 || grads[i].is_contiguous()) &&
               size_t(grads[i].numel()) == reducer_.numel(i) &&
               grads[i].dtype() == reducer_.dtype(),
               "OverlapReduction.finish: gradient ", i, " must be a defined contiguous ",
               dtype_name(reducer_.dtype()), " tensor of ", reducer_.numel(i), " elements");
      ready(i, grads[i].raw_data());
    }
    worker_.join();
    if (error_) std::rethrow_exception(error_);
    stats_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return stats_;
  }

 private:
  static void on_ready(void* self, size_t param, void* data, int64_t numel) {
    auto* o = static_cast<OverlapReduction*>(self);
    if (param < o->data_.size() && size_t(numel) == o->reducer_.numel(param))
      o->ready(param, data);
  }

  void ready(size_t param, void* data) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (data_[param] != nullptr) return;
      data_[param] = data;
      ++in_[bucket_of_[param]];
    }
    cv_.notify_all();
  }

  void work() {
    transport_.set_background(true);
    struct Foreground {  // however work() ends
      MpiTransport& t;
      ~Foreground() { t.set_background(false); }
    } foreground{transport_};
    const auto& buckets = reducer_.buckets();
    for (size_t b = buckets.size(); b-- > 0;) {
      std::vector<void*> data;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        const size_t want = buckets[b].last - buckets[b].first;
        cv_.wait(lock, [&] { return abort_ || in_[b] == want; });
        if (abort_) return;
        data = data_;
      }
      try {
        const AllReduceStats s = reducer_.reduce_bucket(transport_, b, data, pre_, 1.0, opts_);
        stats_.bytes_sent += s.bytes_sent;
        stats_.bytes_uncompressed += s.bytes_uncompressed;
      } catch (...) {
        error_ = std::current_exception();
        return;
      }
    }
  }

  BucketReducer& reducer_;
  MpiTransport& transport_;
  const double pre_;
  const AllReduceOptions opts_;
  python::GradReadyHook hook_{};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<void*> data_;       // per parameter: its gradient's data, once reported
  std::vector<size_t> in_;        // per bucket: gradients reported
  std::vector<size_t> bucket_of_;
  bool abort_ = false;
  AllReduceStats stats_;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point start_;
  std::thread worker_;
};

AllReduceOptions options(const std::string& op, const std::string& codec, Residual* residual,
                         size_t segment_bytes, double timeout_s) {
  NX_CHECK(timeout_s > 0, "all_reduce: timeout_s must be > 0, got ", timeout_s);
  return {parse_reduce_op(op), make_codec(codec), residual, segment_bytes,
          Timeout(int64_t(timeout_s * 1000 + 0.5))};
}

}  // namespace

PYBIND11_MODULE(_C_mpi, m) {
  m.doc() = "Nexus MPI extension: the ring all-reduce over MPI point-to-point";
  py::module_ core = py::module_::import("nexus._C");  // Tensor, comm.Codec/Residual/...
  // The core's errors thrown here map to the same Python types as in nexus._C (this module has
  // its own copy of the core, so _C's translator may not recognise them).
  static py::handle comm_error = py::object(core.attr("comm").attr("CommError")).release();
  static py::handle nexus_error = py::object(core.attr("NexusError")).release();
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CommError& e) {
      py::set_error(comm_error, e.what());
    } catch (const TypeError& e) {
      py::set_error(PyExc_TypeError, e.what());
    } catch (const IndexError& e) {
      py::set_error(PyExc_IndexError, e.what());
    } catch (const ValueError& e) {
      py::set_error(PyExc_ValueError, e.what());
    } catch (const InternalError& e) {
      py::set_error(nexus_error, e.what());
    }
  });
  auto nogil = py::call_guard<py::gil_scoped_release>();

  py::class_<MpiTransport>(m, "Communicator")
      .def(py::init<int64_t>(), py::arg("fortran_handle"), nogil)
      .def_property_readonly("rank", &MpiTransport::rank)
      .def_property_readonly("size", &MpiTransport::size);

  m.def("all_reduce", [](MpiTransport& t, const Tensor& x, const std::string& op,
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
        auto opts = options("sum", "none", nullptr, segment_bytes, timeout_s);
        return b.reduce(t, grads, pre_scale, post_scale, opts);
      }, py::arg("comm"), py::arg("grads"), py::arg("pre_scale") = 1.0,
         py::arg("post_scale") = 1.0, py::arg("segment_bytes") = kMaxSegmentBytes,
         py::arg("timeout_s") = 300.0, nogil);

  py::class_<OverlapReduction>(m, "OverlapReduction")
      .def(py::init([](BucketReducer& r, MpiTransport& t, double pre_scale, size_t segment_bytes,
                       double timeout_s) {
        return std::make_unique<OverlapReduction>(
            r, t, pre_scale, options("sum", "none", nullptr, segment_bytes, timeout_s));
      }), py::arg("reducer"), py::arg("comm"), py::arg("pre_scale") = 1.0,
         py::arg("segment_bytes") = kMaxSegmentBytes, py::arg("timeout_s") = 300.0,
         py::keep_alive<1, 2>(), py::keep_alive<1, 3>())
      // The capsule points into this object: keep the object alive while backward may call it.
      .def("hook", [](OverlapReduction& o) {
        return py::capsule(o.hook(), python::kGradReadyCapsule);
      })
      .def("finish", &OverlapReduction::finish, py::arg("grads"), nogil);

  m.attr("DEFAULT_BUCKET_BYTES") = kDefaultBucketBytes;
  m.def("library_version", &mpi_library_version);
  m.def("abort", &mpi_abort, py::arg("code") = 1);
}
