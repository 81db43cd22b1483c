#!/usr/bin/env bash
# Puts the precompiled guest into a Lambda artifact: runs the artifact's own
# arm64 bootstrap in its precompile mode, which writes ARTIFACTS_DIR/guest-cache
# (wazero's compiled code and a manifest; see internal/guestcache).
#
#   scripts/ship-cache.sh ARTIFACTS_DIR
#
# On an arm64 build host the binary runs natively. Elsewhere it runs under
# qemu-user (Debian's qemu-user-static, installed when missing and we are
# root or have sudo without a password), with the CPU model of Graviton2,
# Neoverse N1: wazero keys its cache on the LSE atomics, which every Graviton
# has and qemu's older models lack. The precompile mode refuses a CPU without
# them, so a mismatch fails the build instead of shipping a cache that never
# hits.
#
# Environment:
#   PML_SHIP_CACHE=0   build without the shipped cache (every cold start
#                      compiles the guest, ~0.5 s)
#   QEMU_AARCH64       the qemu-user binary to use
set -euo pipefail

dir=${1:?usage: ship-cache.sh ARTIFACTS_DIR}
cache=$dir/guest-cache

say() { printf 'ship-cache: %s\n' "$*" >&2; }
die() { printf 'ship-cache: error: %s\n' "$*" >&2; exit 1; }

if [ "${PML_SHIP_CACHE:-1}" = 0 ]; then
  rm -rf "$cache"
  say "PML_SHIP_CACHE=0: $dir ships no compiled guest; its cold starts compile it"
  exit 0
fi

# The bootstrap's ELF machine (bytes 18-19, little-endian): 00b7 is aarch64.
# Only an arm64 binary on another host needs qemu; `make build` with
# LAMBDA_GOFLAGS for this machine's architecture runs it natively.
machine=$(od -An -tx2 -j18 -N2 "$dir/bootstrap" | tr -d ' ')
run=()
case $machine/$(uname -m) in
00b7/aarch64 | 00b7/arm64 | 003e/x86_64) ;;
00b7/*)
  qemu=${QEMU_AARCH64:-$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)}
  if [ -z "$qemu" ]; then
    sudo_cmd=()
    if [ "$(id -u)" -ne 0 ]; then
      sudo -n true 2>/dev/null ||
        die "running the arm64 bootstrap on $(uname -m) needs qemu-aarch64-static, from Debian's qemu-user-static package (apt-get install qemu-user-static, as root); or build without the shipped cache: PML_SHIP_CACHE=0"
      sudo_cmd=(sudo -n)
    fi
    say "installing qemu-user-static"
    "${sudo_cmd[@]}" apt-get update -qq >/dev/null ||
      die "apt-get update failed; install qemu-user-static by hand, or build with PML_SHIP_CACHE=0"
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq qemu-user-static >/dev/null ||
      die "could not install qemu-user-static with apt-get; install it by hand, or build with PML_SHIP_CACHE=0"
    qemu=$(command -v qemu-aarch64-static) || die "qemu-user-static installed no qemu-aarch64-static"
  fi
  run=("$qemu" -cpu neoverse-n1)
  ;;
*) die "$dir/bootstrap (ELF machine $machine) does not run on $(uname -m)" ;;
esac

say "precompiling the guest into $cache${run:+ (under ${run[*]})}"
"${run[@]}" "$dir/bootstrap" --precompile "$cache"
