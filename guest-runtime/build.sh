#!/usr/bin/env bash
# Builds the PML Sandbox guest: QuickJS 2025-04-26 + our glue and prelude,
# compiled to a wasm32-wasi reactor.
#
#   guest-runtime/build.sh OUT.wasm
#
# The QuickJS source is fetched from Debian's archive (the original upstream
# tarball of Debian's `quickjs` source package), checked against a pinned
# sha256 and never committed. The clang/wasi-libc toolchain is installed from
# Debian's packages when missing. The build is reproducible: same inputs,
# same bytes (checked by `make guest-reproducible`).
#
# Environment:
#   PML_CACHE       download cache (default ~/.cache/pml)
#   DEBIAN_MIRROR   archive base URL (default: the first .../debian URL apt uses)
#   PML_GUEST_NAMES=1  keep the wasm function names in the output (the
#                   code is the same, only the name section differs, so
#                   wazero's perf map names the functions for perf)
#   PML_GUEST_PROFILE=1  a profiling guest, never shipped: names kept, and
#                   the glue marks the phases of a run through a pml.mark
#                   import that only a host built with the callgrind tag
#                   provides (internal/guest/profile.go)
set -euo pipefail

out=${1:?usage: build.sh OUT.wasm}
case $out in /*) ;; *) out=$PWD/$out ;; esac
here=$(cd "$(dirname "$0")" && pwd)
cache=${PML_CACHE:-$HOME/.cache/pml}

QJS_VERSION=2025.04.26
QJS_TARBALL=quickjs_${QJS_VERSION}.orig.tar.xz
QJS_SHA256=ec81da5b3249ed648dbc7df4a1654988910e66a118d9b71cb63534216efcfbbe
QJS_POOL_PATH=pool/main/q/quickjs/${QJS_TARBALL}

say() { printf 'guest: %s\n' "$*" >&2; }
die() { printf 'guest: error: %s\n' "$*" >&2; exit 1; }

# --- toolchain -------------------------------------------------------------
need_pkgs=()
command -v clang-14 >/dev/null 2>&1 || command -v clang >/dev/null 2>&1 || need_pkgs+=(clang)
command -v wasm-ld >/dev/null 2>&1 || command -v wasm-ld-14 >/dev/null 2>&1 || need_pkgs+=(lld)
[ -f /usr/include/wasm32-wasi/stdio.h ] || need_pkgs+=(wasi-libc)
ls /usr/lib/llvm-14/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a >/dev/null 2>&1 || need_pkgs+=(libclang-rt-14-dev-wasm32)
command -v wasm-opt >/dev/null 2>&1 || need_pkgs+=(binaryen)
command -v wasm2wat >/dev/null 2>&1 && command -v wat2wasm >/dev/null 2>&1 || need_pkgs+=(wabt)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  say "installing toolchain: ${need_pkgs[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq >/dev/null ||
    die "apt-get update failed; install ${need_pkgs[*]} by hand"
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need_pkgs[@]}" >/dev/null ||
    die "could not install ${need_pkgs[*]} with apt-get"
fi
CC=$(command -v clang-14 || command -v clang)

# --- source ----------------------------------------------------------------
mkdir -p "$cache"
tarball=$cache/$QJS_TARBALL
if [ ! -f "$tarball" ] || ! echo "$QJS_SHA256  $tarball" | sha256sum -c --status; then
  mirror=${DEBIAN_MIRROR:-}
  if [ -z "$mirror" ]; then
    mirror=$(apt-cache policy 2>/dev/null | grep -o 'https\?://[^ ]*/debian' | head -n 1 || true)
  fi
  [ -n "$mirror" ] || die "no Debian mirror found in apt's configuration; set DEBIAN_MIRROR (e.g. https://deb.debian.org/debian)"
  url=$mirror/$QJS_POOL_PATH
  say "fetching $url"
  curl -fsSL --retry 3 --connect-timeout 20 -o "$tarball.part" "$url" ||
    die "could not download QuickJS source from $url (set DEBIAN_MIRROR to another Debian mirror)"
  mv "$tarball.part" "$tarball"
  echo "$QJS_SHA256  $tarball" | sha256sum -c --status ||
    die "sha256 mismatch for $tarball: expected $QJS_SHA256, got $(sha256sum "$tarball" | cut -d' ' -f1)"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$tarball"
src=$work/quickjs-$QJS_VERSION
[ -f "$src/quickjs.c" ] || die "unexpected tarball layout: $src/quickjs.c missing"


# After each automatic collection QuickJS sets the next at 1.5x the live
# heap, which can lie past the run's memory limit: with 45 of 64 MiB live,
# cyclic garbage then filled the rest uncollected and the run ran out of
# memory it had. glue.c's pml_after_gc brings the next collection within
# the limit.
awk '{ print } prev ~ /rt->malloc_gc_threshold = rt->malloc_state.malloc_size \+$/ && $0 ~ /^ *\(rt->malloc_state.malloc_size >> 1\);$/ { print "        pml_after_gc(rt);"; n++ } { prev = $0 } END { exit n == 1 ? 0 : 1 }' \
  "$src/quickjs.c" >"$src/quickjs.c.new" && mv "$src/quickjs.c.new" "$src/quickjs.c" ||
  die "could not patch js_trigger_gc in quickjs.c"

# dtoa.c includes <setjmp.h> without using it; wasi-libc has none.
mkdir -p "$work/shim"
: >"$work/shim/setjmp.h"

# Atomics (CONFIG_ATOMICS, on in quickjs.c): the guest is one thread, so
# every Atomics operation is a plain load or store (clang lowers C11
# atomics so without the wasm threads feature), and quickjs.c's pthread
# calls guard nothing. wasi-libc has no <pthread.h>: this one makes the
# mutexes no-ops. Atomics.wait never blocks: the runtime cannot (QuickJS's
# can_block is false unless JS_SetCanBlock says otherwise, and the glue
# never does), so it throws a TypeError before it would wait, as the
# standard has an agent that cannot suspend do; the condition variables are
# never waited on, and trap if they were.
cat >"$work/shim/pthread.h" <<'SHIM'
#ifndef PML_PTHREAD_SHIM_H
#define PML_PTHREAD_SHIM_H
#include <time.h>
typedef struct { int unused; } pthread_mutex_t;
typedef struct { int unused; } pthread_cond_t;
typedef struct { int unused; } pthread_condattr_t;
#define PTHREAD_MUTEX_INITIALIZER { 0 }
static inline int pthread_mutex_lock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_unlock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a) { (void)c; (void)a; return 0; }
static inline int pthread_cond_destroy(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_signal(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) { (void)c; (void)m; __builtin_trap(); }
static inline int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) { (void)c; (void)m; (void)t; __builtin_trap(); }
#endif
SHIM
grep -q '^#define CONFIG_ATOMICS$' "$src/quickjs.c" || die "quickjs.c no longer defines CONFIG_ATOMICS: see the pthread shim above"

# The prelude becomes a C array so the guest needs no file system.
{
  echo 'const char pml_prelude[] = {'
  od -An -v -tx1 "$here/prelude.js" | sed -e 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'
  echo '0x00};'
  echo "const unsigned int pml_prelude_len = $(wc -c <"$here/prelude.js");"
} >"$work/prelude.c"
cp "$here/glue.c" "$work/glue.c"

cflags=(
  --target=wasm32-wasi -nostdlibinc -isystem /usr/include/wasm32-wasi
  -I "$work/shim" -I "$src"
  -include malloc.h
  -D_GNU_SOURCE '-DCONFIG_VERSION="2025-04-26"'
  -funsigned-char -O2 -g0 -Wno-everything
  # WebAssembly 2.0 features wazero supports by default: memcpy/memset
  # become single memory.copy/memory.fill instructions instead of loops,
  # which each tool call runs many of (per call ~13.3 -> ~13.0 us).
  -mbulk-memory -msign-ext -mnontrapping-fptoint
  "-ffile-prefix-map=$work=."
)
if [ "${PML_GUEST_PROFILE:-}" = 1 ]; then
  cflags+=(-DPML_PROFILE)
  PML_GUEST_NAMES=1
fi
objs=()
for f in "$work/glue.c" "$work/prelude.c" "$src/libregexp.c" "$src/libunicode.c" "$src/cutils.c" "$src/dtoa.c"; do
  o=$work/$(basename "${f%.c}").o
  (cd "$work" && "$CC" "${cflags[@]}" -c "$f" -o "$o")
  objs+=("$o")
done

# Link without -O: with an optimisation level clang 14 runs wasm-opt on its
# own (from its install directory, whatever PATH says), which would strip
# the function names loopcheck.awk needs. We run wasm-opt ourselves below,
# with our flags. wasm-ld is found through PATH under its plain name.
pathdir=$work/bin
mkdir -p "$pathdir"
ln -s "$(command -v wasm-ld || command -v wasm-ld-14)" "$pathdir/wasm-ld"
mkdir -p "$(dirname "$out")"
(cd "$work" && PATH=$pathdir "$CC" --target=wasm32-wasi \
  -mexec-model=reactor \
  -Wl,--stack-first -Wl,-z,stack-size=1048576 \
  -o "$out.tmp" "${objs[@]}" -lm)
# binaryen's -O3 makes CPU-bound JS ~1.8x faster (fib(25): 29 -> 16 ms on
# the development machine); Debian pins its version. -g keeps the names
# for the next step; the final binary has none.
wasm-opt -O3 -g "$out.tmp" -o "$out.opt"
rm -f "$out.tmp"

# Loop check-ins: C code inside QuickJS (Array.prototype.includes over an
# array-like of length 2**53, say) can loop for hours without reaching the
# interpreter's interrupt poll, and a goroutine inside compiled wasm cannot
# be preempted, so one such loop would stall the host's garbage collector.
# Every loop header therefore counts down a budget and, when it runs out,
# calls pml.poll: the host traps if the run must stop and otherwise hands
# back the next budget. See guest-runtime/loopcheck.awk.
wasm2wat "$out.opt" -o "$work/guest.wat"
awk -f "$here/loopcheck.awk" "$work/guest.wat" "$work/guest.wat" >"$work/guest-checked.wat" ||
  die "loop instrumentation failed"
names=()
[ "${PML_GUEST_NAMES:-}" = 1 ] && names=(--debug-names)
wat2wasm "${names[@]}" "$work/guest-checked.wat" -o "$out.checked"
rm -f "$out.opt"
mv "$out.checked" "$out"
say "built $out ($(wc -c <"$out") bytes, sha256 $(sha256sum "$out" | cut -c1-16))"
