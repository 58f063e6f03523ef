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
  set(CMAKE_CROSSCOMPILING_EMULATOR "${NEXUS_QEMU_AARCH64};-cpu;max;-L;/usr/aarch64-linux-gnu")
endif()
