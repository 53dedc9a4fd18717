#!/bin/sh
# meson install script: copies the compiled shardrt.mod ($1) into <prefix>/$2 (honouring DESTDIR).
set -eu
dest="${MESON_INSTALL_DESTDIR_PREFIX}/$2"
mkdir -p "$dest"
install -m 644 "$1" "$dest/shardrt.mod"
