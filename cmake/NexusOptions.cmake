# Build options (tri-state cache variables, never environment reads) and the nexus_warnings
# INTERFACE target that carries our compiler flags.
set(NEXUS_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO (when a toolkit is found), ON, OFF")
set_property(CACHE NEXUS_CUDA PROPERTY STRINGS AUTO ON OFF)
set(NEXUS_MPI "AUTO" CACHE STRING "Build the MPI extension _C_mpi: AUTO, ON, OFF")
set_property(CACHE NEXUS_MPI PROPERTY STRINGS AUTO ON OFF)
set(NEXUS_ARCH "portable" CACHE STRING
    "portable: a baseline core with kernel variants chosen at run time; else one -march for everything (native, x86-64-v3, ...)")
set(NEXUS_SANITIZE "" CACHE STRING
    "Comma-separated sanitizers for the core and bindings, e.g. address,undefined")

add_library(nexus_warnings INTERFACE)
target_compile_options(nexus_warnings INTERFACE
  -Wall -Wextra -Wundef -Wno-unused-parameter -Wno-sign-compare)

# ---- CPU variants (csrc/base/cpu_variant.h) ---------------------------------------------------
# NEXUS_CPU_VARIANTS: name=march pairs, baseline first. The core is compiled for the first; the
# hot kernels once per pair, and the best the CPU runs is chosen at import.
if(NEXUS_ARCH STREQUAL "portable")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    set(NEXUS_CPU_VARIANTS "baseline=x86-64-v2;avx2=x86-64-v3;avx512=x86-64-v4")
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
    # NEON is part of armv8-a. No SVE variant yet: gcc 12 stops with an internal compiler error
    # vectorising vec_math.h for SVE, and what SVE gains was not measurable here (qemu only).
    set(NEXUS_CPU_VARIANTS "baseline=armv8-a")
  else()
    set(NEXUS_CPU_VARIANTS "baseline=")  # the compiler's default target
  endif()
else()
  set(NEXUS_CPU_VARIANTS "native=${NEXUS_ARCH}")
endif()
set(NEXUS_CPU_VARIANT_DEFINES "")
set(NEXUS_CPU_VARIANT_NAMES "")
foreach(_v baseline avx2 avx512 native)
  set(_has 0)
  set(_march "")
  foreach(_pair IN LISTS NEXUS_CPU_VARIANTS)
    string(REPLACE "=" ";" _pair "${_pair}")
    list(GET _pair 0 _name)
    if(_name STREQUAL _v)
      set(_has 1)
      list(LENGTH _pair _len)
      if(_len GREATER 1)
        list(GET _pair 1 _march)
      endif()
      list(APPEND NEXUS_CPU_VARIANT_NAMES ${_v})
      set(NEXUS_CPU_MARCH_${_v} "${_march}")
    endif()
  endforeach()
  string(APPEND NEXUS_CPU_VARIANT_DEFINES
    "#define NEXUS_CPU_HAS_${_v} ${_has}\n#define NEXUS_CPU_MARCH_${_v} \"${_march}\"\n")
endforeach()
list(GET NEXUS_CPU_VARIANT_NAMES 0 NEXUS_CPU_BASE_VARIANT)
set(NEXUS_CORE_MARCH "${NEXUS_CPU_MARCH_${NEXUS_CPU_BASE_VARIANT}}")

# Compiler flags shared by the core, its variants and the extensions; -march is per target.
add_library(nexus_flags INTERFACE)
# -ffp-contract=off: a*b+c is fused only where the code says so (vec_math's fmadd), never by the
# compiler, so eager kernels, the interpreter and the generated kernels (built with the same
# flag) give the same bits.
target_compile_options(nexus_flags INTERFACE -fno-math-errno -ffp-contract=off)
if(NEXUS_SANITIZE)
  target_compile_options(nexus_flags INTERFACE
    -fsanitize=${NEXUS_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(nexus_flags INTERFACE -fsanitize=${NEXUS_SANITIZE})
endif()
