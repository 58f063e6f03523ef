# Build options (tri-state cache variables, never environment reads) and the nexus_warnings
# INTERFACE target that carries our compiler flags.
set(NEXUS_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO (when a toolkit is found), ON, OFF")
set_property(CACHE NEXUS_CUDA PROPERTY STRINGS AUTO ON OFF)
set(NEXUS_MPI "AUTO" CACHE STRING "Build the MPI extension _C_mpi: AUTO, ON, OFF")
set_property(CACHE NEXUS_MPI PROPERTY STRINGS AUTO ON OFF)
set(NEXUS_ARCH "native" CACHE STRING
    "Target CPU for -march (native: the build machine; e.g. x86-64-v3 for a portable AVX2 build)")
set(NEXUS_SANITIZE "" CACHE STRING
    "Comma-separated sanitizers for the core and bindings, e.g. address,undefined")

add_library(nexus_warnings INTERFACE)
target_compile_options(nexus_warnings INTERFACE
  -Wall -Wextra -Wundef -Wno-unused-parameter -Wno-sign-compare)

add_library(nexus_flags INTERFACE)
if(NEXUS_ARCH)
  target_compile_options(nexus_flags INTERFACE -march=${NEXUS_ARCH})
endif()
# -ffp-contract=off: a*b+c is fused only where the code says so (vec_math's fmadd), never by the
# compiler, so eager kernels, the interpreter and the generated kernels (built with the same
# flag) give the same bits.
target_compile_options(nexus_flags INTERFACE -fno-math-errno -ffp-contract=off)
if(NEXUS_SANITIZE)
  target_compile_options(nexus_flags INTERFACE
    -fsanitize=${NEXUS_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(nexus_flags INTERFACE -fsanitize=${NEXUS_SANITIZE})
endif()
