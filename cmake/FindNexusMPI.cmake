# Finds the MPI that the _C_mpi extension links (NEXUS_MPI=AUTO|ON|OFF). Sets NEXUS_HAVE_MPI (0/1),
# NEXUS_MPI_NAME (for the summary) and, when found, the INTERFACE target nexus_mpi.
#
# 1. The `mpich` wheel (a build requirement): its mpi.h and libmpi.so.12 sit in the installing
#    environment's prefix. Inside pip's isolated build environment sys.prefix is the target
#    environment, not the build one, so ask importlib.metadata where the distribution's files are.
# 2. Otherwise a system MPI through CMake's FindMPI (mpicc on PATH, or MPI_HOME).
set(NEXUS_HAVE_MPI 0)
set(NEXUS_MPI_NAME "NEXUS_MPI=${NEXUS_MPI}")
if(NOT NEXUS_PYTHON)
  if(NEXUS_MPI STREQUAL "ON")
    message(FATAL_ERROR "NEXUS_MPI=ON needs NEXUS_PYTHON=ON: _C_mpi is a Python extension")
  endif()
  set(NEXUS_MPI_NAME "not built: NEXUS_PYTHON=OFF")
  return()
endif()
if(NEXUS_MPI STREQUAL "OFF")
  set(NEXUS_MPI_NAME "off (NEXUS_MPI=OFF)")
  return()
endif()

set(_nx_mpi_probe [=[
import importlib.metadata as md
d = md.distribution("mpich")
files = [str(d.locate_file(f).resolve()) for f in (d.files or [])]
inc = [f for f in files if f.endswith("/include/mpi.h")]
lib = [f for f in files if f.endswith("/libmpi.so.12")] or [f for f in files if f.endswith("/libmpi.so")]
print(inc[0].rsplit("/", 1)[0]); print(lib[0]); print(d.version)
]=])
execute_process(COMMAND "${Python_EXECUTABLE}" -c "${_nx_mpi_probe}"
                OUTPUT_VARIABLE _nx_mpi_out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE _nx_mpi_rc)
add_library(nexus_mpi INTERFACE)
if(_nx_mpi_rc EQUAL 0)
  string(REPLACE "\n" ";" _nx_mpi_out "${_nx_mpi_out}")
  list(GET _nx_mpi_out 0 NEXUS_MPI_INCLUDE_DIR)
  list(GET _nx_mpi_out 1 NEXUS_MPI_LIBRARY)
  list(GET _nx_mpi_out 2 _nx_mpich_version)
  nexus_stage(mpich/include "${NEXUS_MPI_INCLUDE_DIR}" NEXUS_MPI_INCLUDE_DIR)
  nexus_stage(mpich/lib "${NEXUS_MPI_LIBRARY}" NEXUS_MPI_LIBRARY)
  target_include_directories(nexus_mpi INTERFACE "${NEXUS_MPI_INCLUDE_DIR}")
  target_link_libraries(nexus_mpi INTERFACE "${NEXUS_MPI_LIBRARY}")
  # At run time libmpi.so.12 is the one mpi4py already loaded; the RPATH finds the wheel's copy in
  # <prefix>/lib from <prefix>/lib/pythonX.Y/site-packages/nexus when imported on its own.
  set(NEXUS_MPI_RPATH "$ORIGIN/../../..")
  set(NEXUS_MPI_NAME "MPICH ${_nx_mpich_version} from the mpich wheel")
  set(NEXUS_HAVE_MPI 1)
else()
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    target_link_libraries(nexus_mpi INTERFACE MPI::MPI_C)
    list(GET MPI_C_LIBRARIES 0 _nx_mpi_first)
    get_filename_component(NEXUS_MPI_RPATH "${_nx_mpi_first}" DIRECTORY)
    set(NEXUS_MPI_NAME "system MPI ${MPI_C_VERSION} (${_nx_mpi_first})")
    set(NEXUS_HAVE_MPI 1)
  endif()
endif()

if(NEXUS_HAVE_MPI)
  # The C API only: skip the MPI-2 C++ bindings some mpi.h headers still pull in.
  target_compile_definitions(nexus_mpi INTERFACE MPICH_SKIP_MPICXX OMPI_SKIP_MPICXX)
elseif(NEXUS_MPI STREQUAL "ON")
  message(FATAL_ERROR "NEXUS_MPI=ON but no MPI was found: pip install mpich (or put a system "
                      "MPI's mpicc on PATH), or configure with NEXUS_MPI=AUTO/OFF")
else()
  set(NEXUS_MPI_NAME "not found: pip install mpich")
endif()
