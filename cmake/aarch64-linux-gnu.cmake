# Cross build for AArch64 Linux with Debian's cross compiler
# (g++-aarch64-linux-gnu) and the arm64 libraries of Debian multiarch
# (scripts/test-aarch64.sh installs both). Test binaries run under
# qemu-user: ctest and gtest discovery go through the emulator, which takes
# the CPU model from QEMU_CPU (max: sdot + bf16; cortex-a53: plain NEON).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
# Multiarch: arm64 libraries and their CMake/pkg-config files live in
# /usr/lib/aarch64-linux-gnu; arch-independent headers in /usr/include.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# The binaries run on the arm64 loader, libc, libstdc++ and libgomp of
# Debian multiarch (/lib/aarch64-linux-gnu, installed with the -dev
# packages): not `-L /usr/aarch64-linux-gnu`, whose loader (the cross
# toolchain's glibc build) would be paired with the multiarch libc.so.6 of
# another build, and hangs in it.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
# Debian's libhttp-parser-dev is not multiarch (it cannot be installed for
# arm64 beside the amd64 one): the host's header with the arm64 library.
set(HTTP_PARSER_LIBRARY /usr/lib/aarch64-linux-gnu/libhttp_parser.so.2.9
    CACHE FILEPATH "http-parser for arm64")
