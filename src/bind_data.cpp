// Data-pipeline bindings: the parsers run with the GIL released; their columns move into numpy
// without a copy (a capsule owns each buffer). String columns become object arrays of str, which
// needs the interpreter, so that conversion (one PyUnicode per distinct text) lives here.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string_view>
#include <unordered_map>

#include "bindings.h"
#include "data/csv.h"
#include "data/idx.h"
#include "data/jsonl.h"
#include "data/loader.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace nexus::python {
namespace {

template <class T> py::capsule owner(T* p) {
  return py::capsule(p, [](void* q) { delete static_cast<T*>(q); });
}

// Rows with the same text share one str, as pyarrow's to_pandas does by default: a column of
// labels or categories repeats a few values over many rows, and a lookup costs less than a new
// object (and its memory). The table of shared values stops growing at kMaxShared entries, and
// the lookups stop once it is full and fewer than half of the rows so far were found in it (a
// column of distinct values: ids, free text).
constexpr size_t kMaxShared = 4096;

py::object strings_to_numpy(const data::Column& c) {
  py::array out = py::module_::import("numpy").attr("empty")(c.rows, "object");
  auto** slots = static_cast<PyObject**>(out.mutable_data());  // all None
  std::unordered_map<std::string_view, PyObject*> shared;      // borrowed: out holds a reference
  int64_t looked = 0, found = 0;
  bool sharing = true;
  for (int64_t i = 0; i < c.rows; ++i) {
    if (!c.valid.empty() && !c.valid[size_t(i)]) continue;
    const std::string_view text(c.chars.data() + c.offsets[size_t(i)],
                                size_t(c.offsets[size_t(i) + 1] - c.offsets[size_t(i)]));
    PyObject* u = nullptr;
    if (sharing) {
      ++looked;
      if (auto it = shared.find(text); it != shared.end()) {
        u = it->second;
        Py_INCREF(u);
        ++found;
      }
    }
    if (!u) {
      u = PyUnicode_DecodeUTF8(text.data(), py::ssize_t(text.size()), "surrogatepass");
      if (!u) throw py::error_already_set();
      if (sharing && shared.size() < kMaxShared) shared.emplace(text, u);
      else if (sharing && 2 * found < looked) sharing = false;
    }
    PyObject* none = slots[i];
    slots[i] = u;
    Py_XDECREF(none);
  }
  return out;
}

py::object column_to_numpy(data::Column& c) {
  if (c.dtype == data::DType::String) return strings_to_numpy(c);
  auto* buf = new data::Buffer(std::move(c.values));
  std::vector<py::ssize_t> shape{c.rows};
  if (c.width >= 0) shape.push_back(c.width);
  return py::array(py::dtype(data::dtype_name(c.dtype)), shape, buf->data.get(), owner(buf));
}

// (list of (name, array), stats dict)
py::tuple table_to_python(data::Table& t) {
  py::list cols;
  for (auto& c : t.columns) cols.append(py::make_tuple(c.name, column_to_numpy(c)));
  py::dict stats("rows"_a = t.stats.rows, "lines"_a = t.stats.lines, "skipped"_a = t.stats.skipped,
                 "skipped_lines"_a = t.stats.skipped_lines, "bytes"_a = t.stats.bytes);
  return py::make_tuple(cols, stats);
}

template <class F> auto without_gil(F&& f) {
  py::gil_scoped_release nogil;
  return f();  // the result is built before the GIL is taken back
}

template <class F> py::tuple read_table(F&& read) {
  data::Table t = without_gil(read);
  return table_to_python(t);
}

std::pair<const char*, size_t> bytes_of(const py::buffer& b) {
  py::buffer_info info = b.request();
  NX_CHECK(info.ndim <= 1 && (info.ndim == 0 || info.strides[0] == info.itemsize),
           "expected a contiguous bytes-like object");
  return {static_cast<const char*>(info.ptr), size_t(info.size * info.itemsize)};
}

py::tuple idx_to_python(data::IdxArray&& a) {
  auto* buf = new data::Buffer(std::move(a.values));
  py::array flat(py::dtype(a.dtype), {py::ssize_t(buf->bytes / py::dtype(a.dtype).itemsize())}, buf->data.get(),
                 owner(buf));
  return py::make_tuple(flat, a.shape);
}

std::vector<data::LoaderSource> loader_sources(const std::vector<py::array>& arrays) {
  std::vector<data::LoaderSource> out;
  for (const auto& a : arrays) {
    NX_CHECK(a.ndim() >= 1 && (a.flags() & py::array::c_style),
             "DataLoader: expected "
             "C-contiguous arrays with at least one dimension");
    int64_t row = a.itemsize();
    for (py::ssize_t d = 1; d < a.ndim(); ++d) row *= a.shape(d);
    out.push_back({static_cast<const std::byte*>(a.data()), a.shape(0), row});
  }
  return out;
}

// A batch buffer goes back to the loader's pool when numpy lets go of it.
struct PooledBuffer {
  data::Buffer buf;
  std::shared_ptr<data::BufferPool> pool;
  ~PooledBuffer() { pool->give(std::move(buf)); }
};

py::tuple batch_to_python(data::Batch& b, const std::shared_ptr<data::BufferPool>& pool) {
  py::list cols;
  for (auto& c : b.columns) {
    auto* h = new PooledBuffer{std::move(c), pool};
    cols.append(py::array(py::dtype("uint8"), {py::ssize_t(h->buf.bytes)}, h->buf.data.get(), owner(h)));
  }
  auto* idx = new std::vector<int64_t>(std::move(b.indices));
  return py::make_tuple(cols, py::array(py::ssize_t(idx->size()), idx->data(), owner(idx)));
}

}  // namespace

void bind_data(py::module_& m) {
  using data::ReadOptions;
  py::class_<ReadOptions>(m, "ReadOptions")
      .def(py::init<>())
      .def_readwrite("columns", &ReadOptions::columns)
      .def_readwrite("dtypes", &ReadOptions::dtypes)
      .def_readwrite("skip_errors", &ReadOptions::skip_errors)
      .def_readwrite("threads", &ReadOptions::threads);

  m.def("read_jsonl", [](const std::string& path, const ReadOptions& o) {
    return read_table([&] { return data::read_jsonl(path, o); });
  });
  m.def("parse_jsonl", [](const py::buffer& b, const ReadOptions& o) {
    auto [p, n] = bytes_of(b);
    return read_table([&] { return data::parse_jsonl(p, n, o); });
  });
  py::class_<data::JsonlReader>(m, "JsonlReader")
      .def(py::init<const std::string&, ReadOptions, int64_t>(), py::call_guard<py::gil_scoped_release>())
      .def("next", [](data::JsonlReader& r) -> py::object {  // None at the end
        data::Table t;
        bool more = false;
        py::tuple out = read_table([&] {
          more = r.next(t);
          return std::move(t);
        });
        return more ? py::object(out) : py::none();
      });

  py::class_<data::CsvOptions>(m, "CsvOptions")
      .def(py::init<>())
      .def_readwrite("delimiter", &data::CsvOptions::delimiter)
      .def_readwrite("quote", &data::CsvOptions::quote)
      .def_readwrite("header", &data::CsvOptions::header)
      .def_readwrite("names", &data::CsvOptions::names);
  m.def("read_csv", [](const std::string& path, const ReadOptions& o, const data::CsvOptions& c) {
    return read_table([&] { return data::read_csv(path, o, c); });
  });
  m.def("parse_csv", [](const py::buffer& b, const ReadOptions& o, const data::CsvOptions& c) {
    auto [p, n] = bytes_of(b);
    return read_table([&] { return data::parse_csv(p, n, o, c); });
  });

  m.def("read_idx",
        [](const std::string& path) { return idx_to_python(without_gil([&] { return data::read_idx(path); })); });
  m.def("parse_idx", [](const py::buffer& b) {
    auto [p, n] = bytes_of(b);
    return idx_to_python(without_gil([&] { return data::parse_idx(p, n); }));
  });

  using data::LoaderOptions;
  py::class_<LoaderOptions>(m, "LoaderOptions")
      .def(py::init<>())
      .def_readwrite("batch_size", &LoaderOptions::batch_size)
      .def_readwrite("shuffle", &LoaderOptions::shuffle)
      .def_readwrite("seed", &LoaderOptions::seed)
      .def_readwrite("drop_last", &LoaderOptions::drop_last)
      .def_readwrite("prefetch", &LoaderOptions::prefetch)
      .def_readwrite("shares", &LoaderOptions::shares)
      .def_readwrite("rank", &LoaderOptions::rank);
  m.def("batch_count", &data::batch_count);
  py::class_<data::BufferPool, std::shared_ptr<data::BufferPool>>(m, "BufferPool").def(py::init<>());
  py::class_<data::BatchProducer>(m, "BatchProducer")
      .def(py::init([](const std::vector<py::array>& arrays, const LoaderOptions& o, uint64_t epoch,
                       std::shared_ptr<data::BufferPool> pool) {
             return std::make_unique<data::BatchProducer>(loader_sources(arrays), o, epoch, pool);
           }),
           py::keep_alive<1, 2>())
      .def("next", [](data::BatchProducer& p) -> py::object {  // None at the end of the epoch
        data::Batch b;
        bool more;
        {
          py::gil_scoped_release nogil;
          more = p.next(b);
        }
        return more ? py::object(batch_to_python(b, p.pool())) : py::none();
      });
}

}  // namespace nexus::python
