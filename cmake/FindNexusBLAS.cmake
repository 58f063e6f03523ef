# Finds OpenBLAS from the scipy-openblas32 wheel (headers, CMake config and libscipy_openblas.so).
# NEXUS_BLAS_ROOT names the wheel's package directory (<root>/include, <root>/lib), so a build of
# the core alone, or for another CPU, needs no Python. Unset, the wheel is a build requirement:
# inside pip's isolated build environment the interpreter running CMake can import it, so ask it
# where it is.
set(NEXUS_BLAS_ROOT "" CACHE PATH
    "The scipy_openblas32 package directory (include/ and lib/ in it); empty: ask Python where it is")
if(NEXUS_BLAS_ROOT)
  set(NEXUS_BLAS_INCLUDE_DIR "${NEXUS_BLAS_ROOT}/include")
  set(NEXUS_BLAS_LIB_DIR "${NEXUS_BLAS_ROOT}/lib")
  if(NOT EXISTS "${NEXUS_BLAS_INCLUDE_DIR}/cblas.h")
    message(FATAL_ERROR "NEXUS_BLAS_ROOT=${NEXUS_BLAS_ROOT} has no include/cblas.h; name the scipy_openblas32 "
                        "package directory: python -c 'import scipy_openblas32; print(scipy_openblas32.__path__[0])'")
  endif()
  # The wheel's pkg-config file carries its version.
  set(NEXUS_BLAS_VERSION "unknown")
  if(EXISTS "${NEXUS_BLAS_LIB_DIR}/pkgconfig/scipy-openblas.pc")
    file(STRINGS "${NEXUS_BLAS_LIB_DIR}/pkgconfig/scipy-openblas.pc" _nx_blas_pc REGEX "^version=" LIMIT_COUNT 1)
    string(REGEX REPLACE "^version=" "" NEXUS_BLAS_VERSION "${_nx_blas_pc}")
  endif()
  # NO_CMAKE_FIND_ROOT_PATH: the directory is used as given, also under a cross toolchain's sysroot.
  find_library(NEXUS_BLAS_LIBRARY NAMES scipy_openblas PATHS "${NEXUS_BLAS_LIB_DIR}" NO_DEFAULT_PATH
               NO_CMAKE_FIND_ROOT_PATH REQUIRED)
else()
  if(NOT Python_EXECUTABLE)
    find_package(Python REQUIRED COMPONENTS Interpreter)
  endif()
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import scipy_openblas32 as s; print(s.get_include_dir()); print(s.get_lib_dir()); print(s.__version__)"
    OUTPUT_VARIABLE _nx_blas_out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _nx_blas_rc)
  if(NOT _nx_blas_rc EQUAL 0)
    message(FATAL_ERROR "scipy-openblas32 not importable by ${Python_EXECUTABLE}: pip install scipy-openblas32 "
                        "(or set NEXUS_BLAS_ROOT to its package directory)")
  endif()
  string(REPLACE "\n" ";" _nx_blas_out "${_nx_blas_out}")
  list(GET _nx_blas_out 0 NEXUS_BLAS_INCLUDE_DIR)
  list(GET _nx_blas_out 1 NEXUS_BLAS_LIB_DIR)
  list(GET _nx_blas_out 2 NEXUS_BLAS_VERSION)
  # The wheel in pip's build environment is gone after the build: compile and link against staged
  # copies (cmake/NexusStage.cmake), not a cached find_library result that the next build would
  # still name.
  if(NOT EXISTS "${NEXUS_BLAS_LIB_DIR}/libscipy_openblas.so")
    message(FATAL_ERROR "scipy-openblas32 has no ${NEXUS_BLAS_LIB_DIR}/libscipy_openblas.so")
  endif()
  nexus_stage(openblas/lib "${NEXUS_BLAS_LIB_DIR}/libscipy_openblas.so" NEXUS_BLAS_LIBRARY)
endif()
# The headers staged in either case: every build of the core then compiles with the same commands
# relative to its build directory, so with CCACHE_BASEDIR (as .ci/run sets it) tools/ctest.sh's
# build of the core reuses the objects of the pip build before it.
nexus_stage(openblas/include "${NEXUS_BLAS_INCLUDE_DIR}" NEXUS_BLAS_INCLUDE_DIR)
add_library(nexus_blas INTERFACE)
target_include_directories(nexus_blas INTERFACE "${NEXUS_BLAS_INCLUDE_DIR}")
target_link_libraries(nexus_blas INTERFACE "${NEXUS_BLAS_LIBRARY}")
set(NEXUS_BLAS_NAME "OpenBLAS ${NEXUS_BLAS_VERSION} (scipy-openblas32)")
