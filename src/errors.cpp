// C++ error types -> Python: ValueError, TypeError, IndexError, OSError (its errno subclass),
// RuntimeError (a device that cannot be used), NotImplementedError, and
// NexusError for broken invariants ("internal error, please report").
#include "base/error.h"
#include "bindings.h"

namespace py = pybind11;

namespace nexus::python {

void bind_errors(py::module_& m) {
  static py::exception<InternalError> nexus_error(m, "NexusError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const OSError& e) {
      // OSError(errno, message, filename) is an instance of the subclass for errno.
      py::object err = py::handle(PyExc_OSError)(e.error_number(), e.what(), e.path());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    } catch (const MemoryError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const ZeroDivisionError& e) {
      PyErr_SetString(PyExc_ZeroDivisionError, e.what());
    } catch (const DeviceError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const InternalError& e) {
      py::set_error(nexus_error, e.what());
    }
  });
}

}  // namespace nexus::python
