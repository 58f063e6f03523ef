# Finds OpenBLAS from the scipy-openblas32 wheel (headers, CMake config and libscipy_openblas.so).
# The wheel is a build requirement; inside pip's isolated build environment the interpreter running
# CMake can import it, so ask it where it is.
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import scipy_openblas32 as s; print(s.get_include_dir()); print(s.get_lib_dir()); print(s.__version__)"
  OUTPUT_VARIABLE _nx_blas_out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _nx_blas_rc)
if(NOT _nx_blas_rc EQUAL 0)
  message(FATAL_ERROR "scipy-openblas32 not importable by ${Python_EXECUTABLE}: pip install scipy-openblas32")
endif()
string(REPLACE "\n" ";" _nx_blas_out "${_nx_blas_out}")
list(GET _nx_blas_out 0 NEXUS_BLAS_INCLUDE_DIR)
list(GET _nx_blas_out 1 NEXUS_BLAS_LIB_DIR)
list(GET _nx_blas_out 2 NEXUS_BLAS_VERSION)
find_library(NEXUS_BLAS_LIBRARY NAMES scipy_openblas PATHS "${NEXUS_BLAS_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
add_library(nexus_blas INTERFACE)
target_include_directories(nexus_blas INTERFACE "${NEXUS_BLAS_INCLUDE_DIR}")
target_link_libraries(nexus_blas INTERFACE "${NEXUS_BLAS_LIBRARY}")
set(NEXUS_BLAS_NAME "OpenBLAS ${NEXUS_BLAS_VERSION} (scipy-openblas32)")
