#!/usr/bin/env bash
# Installs the build into a scratch DESTDIR, then builds and runs consumer.cpp against it through pkg-config.
# Usage: check-install.sh <build dir> <source dir>
set -euo pipefail
build="$1"
src="$2"
dest="$(mktemp -d)"
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --quiet --no-rebuild
pcdir="$(dirname "$(find "$dest" -name shardrt.pc | head -n 1)")"
export PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$dest"
libdir="$(dirname "$(find "$dest" -name 'libshardrt.so' | head -n 1)")"
c++ -std=c++20 "$src/tests/install/consumer.cpp" $(pkg-config --cflags --libs shardrt) -o "$dest/consumer"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$dest/consumer"
