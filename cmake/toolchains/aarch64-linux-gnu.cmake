# Cross-compiles the core for 64-bit ARM Linux with Debian's g++-aarch64-linux-gnu; tests run
# under qemu-aarch64 (Debian's qemu-user-static, -cpu max: every feature it emulates) through
# CMAKE_CROSSCOMPILING_EMULATOR. Used by tools/ctest-aarch64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# BOTH: NEXUS_BLAS_ROOT (the aarch64 OpenBLAS wheel, unpacked) lies outside the sysroot.
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
find_program(NEXUS_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(NEXUS_QEMU_AARCH64)
  # The sysroot's libraries first: its ld.so would otherwise search /lib/aarch64-linux-gnu too and
  # load the libc of the multiarch libc6:arm64 (a dependency of zlib1g:arm64, which the OpenBLAS
  # wheel's libgfortran needs), and a loader and libc from two glibc builds deadlock at the first
  # pthread_create.
  set(CMAKE_CROSSCOMPILING_EMULATOR
      "${NEXUS_QEMU_AARCH64};-cpu;max;-L;/usr/aarch64-linux-gnu;-E;LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib:/usr/lib/aarch64-linux-gnu")
endif()
