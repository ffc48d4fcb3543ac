# Sourced by packaging/build and .ci/run (`. packaging/zig-env.sh`, from the checkout's root):
# from then on cargo compiles C (SQLite, zstd, ring) and links with zig against glibc 2.17's
# symbols (packaging/zig-cc), so what it builds starts on SNG7 as on Debian 12.
TANDEM_ZIG=$(packaging/zig-fetch)
export TANDEM_ZIG
export CC_x86_64_unknown_linux_gnu=$PWD/packaging/zig-cc
export AR_x86_64_unknown_linux_gnu=$PWD/packaging/zig-ar
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=$PWD/packaging/zig-cc
