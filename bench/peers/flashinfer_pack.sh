#!/usr/bin/env bash
# bench/peers/flashinfer_pack.sh [--clean]: packs FlashInfer for the bench peers into .whl/ (git
# ignores it), on the development machine (no GPU needed), for a GPU machine without network:
#
#   .whl/site-packages/  flashinfer 0.7.2 (the Python modules `import flashinfer` and the peers'
#                        calls load, the csrc templates their module specs read, and
#                        flashinfer/data/aot/<name>/<name>.so: the prebuilt sm_90a modules),
#                        apache-tvm-ffi (both cp311 and cp312 core extensions side by side, so
#                        either Python imports it), and the import-time dependencies torch does
#                        not bring: packaging, requests (urllib3, idna, certifi,
#                        charset_normalizer), nvidia-ml-py (pynvml), tqdm
#   .whl/MANIFEST.txt    versions, modules, sizes
#
# The modules are built here by FlashInfer's own JIT (flashinfer_prebuild.py: nvcc for sm_90a,
# FLASHINFER_CUDA_ARCH_LIST=9.0a, the build tree in .whl/jit-workspace, removed afterwards) in a
# venv holding the GPU machine's torch (torch==2.11.0, the cu130 wheel: its CUDA libraries are not
# used here), then stripped. A module already in .whl/ is kept and not rebuilt (--clean: start
# over). Then it checks, in that venv and with nothing but .whl/ added, that `import flashinfer`
# works, that every module the peers use is prebuilt, and that each .so loads (a libcuda.so.1
# stub from CUDA's lib64/stubs stands in for the driver here).
#
# Environment: FI_PACK_CACHE (downloads and the venv; default /tmp/kjit-fi-pack), FI_PACK_PYTHON
# (the venv's Python; default python3.12, else python3), MAX_JOBS (nvcc jobs; default 1),
# CUDA_HOME (default /usr/local/cuda), FI_PREBUILD_FA2=1 (also the fa2 prefill module:
# flashinfer_peers.py --backend fa2 and decode --tensor-cores).
# docs/gpu-runs.md ("FlashInfer peers") says what to carry and how the peers find it.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
FI_VERSION=0.7.2
TORCH_VERSION=2.11.0
CACHE=${FI_PACK_CACHE:-/tmp/kjit-fi-pack}
WHL=$ROOT/.whl
SITE=$WHL/site-packages
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export MAX_JOBS=${MAX_JOBS:-1}
clean=0
[ "${1:-}" = "--clean" ] && clean=1
say() { echo "[flashinfer_pack] $*"; }

# 1. A venv with the GPU machine's torch, for FlashInfer's JIT to import (not system-wide).
PY=${FI_PACK_PYTHON:-}
if [ -z "$PY" ]; then
  for c in python3.12 python3; do "$c" -c "import venv" 2>/dev/null && { PY=$c; break; }; done
fi
pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
VENV=$CACHE/venv-cp$pyver
mkdir -p "$CACHE/wheels"
if ! "$VENV/bin/python" -c "import torch, numpy" 2>/dev/null; then
  say "venv $VENV: torch==$TORCH_VERSION numpy (a few GB, once)"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" numpy
fi
[ -x "$VENV/bin/ninja" ] || "$VENV/bin/pip" install -q ninja  # FlashInfer's JIT runs `ninja`

# 2. The wheels: flashinfer (no deps), apache-tvm-ffi for cp311 and cp312, the import-time deps.
W=$CACHE/wheels
dl() { "$VENV/bin/pip" download -q --no-deps --only-binary=:all: -d "$W" "$@"; }
ls "$W"/flashinfer_python-$FI_VERSION-*.whl >/dev/null 2>&1 || dl "flashinfer-python==$FI_VERSION"
for v in 311 312; do
  ls "$W"/apache_tvm_ffi-*-cp$v-*.whl >/dev/null 2>&1 ||
    dl --python-version $v --implementation cp --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "apache-tvm-ffi>=0.1.11,<0.2"
done
DEPS="packaging requests urllib3 idna certifi charset-normalizer nvidia-ml-py tqdm"
for d in $DEPS; do
  ls "$W"/$(echo $d | tr - _)-*-py3-none-any.whl >/dev/null 2>&1 ||
    dl --python-version 3.12 --implementation py --platform any "$d"
done
tvm311=$(ls "$W"/apache_tvm_ffi-*-cp311-*.whl | sort -V | tail -1)
tvm312=$(ls "$W"/apache_tvm_ffi-*-cp312-*.whl | sort -V | tail -1)
[ "$(basename "$tvm311" | cut -d- -f2)" = "$(basename "$tvm312" | cut -d- -f2)" ] ||
  { say "apache-tvm-ffi cp311 and cp312 wheels differ in version: $tvm311 $tvm312"; exit 1; }

# 3. Unpack (keeping the modules already built unless --clean).
KEEP_AOT=$CACHE/aot-kept
rm -rf "$KEEP_AOT"
if [ $clean = 0 ] && [ -d "$SITE/flashinfer/data/aot" ]; then
  mv "$SITE/flashinfer/data/aot" "$KEEP_AOT"
fi
rm -rf "$WHL"
mkdir -p "$SITE"
unzip -q "$W/flashinfer_python-$FI_VERSION-py3-none-any.whl" 'flashinfer/*' \
  'flashinfer_python-*.dist-info/*' -d "$SITE"
rm -f "$SITE"/flashinfer_python-*.dist-info/RECORD  # 1.4 MB of file hashes; METADATA, licenses stay
unzip -q "$tvm312" -d "$SITE"
unzip -q -o "$tvm311" 'tvm_ffi/core.cpython-311-*' -d "$SITE"
for d in $DEPS; do unzip -q -o "$W"/$(echo $d | tr - _)-*-py3-none-any.whl -d "$SITE"; done
[ -d "$KEEP_AOT" ] && mv "$KEEP_AOT" "$SITE/flashinfer/data/aot"

# 4. Build the modules the peers use (FlashInfer's JIT, sm_90a), strip, install under data/aot.
export PYTHONPATH=$SITE PYTHONNOUSERSITE=1
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=$WHL/jit-workspace
export PATH=$VENV/bin:$CUDA_HOME/bin:$PATH
t0=$(date +%s)
rc=0
"$VENV/bin/python" bench/peers/flashinfer_prebuild.py > "$CACHE/prebuild.log" 2>&1 || rc=$?
grep -v '^\[\|Building JIT module' "$CACHE/prebuild.log" || true
say "modules built in $(($(date +%s) - t0)) s (MAX_JOBS=$MAX_JOBS); log $CACHE/prebuild.log"
[ $rc = 0 ] || { say "a module failed to build (see the log); .whl/ is not slimmed"; exit 1; }

# The peers' calls, traced on the CPU, ask for exactly these modules (flashinfer_prebuild.py).
FLASHINFER_USE_CUDA_NORM=1 "$VENV/bin/python" bench/peers/flashinfer_prebuild.py --verify-names \
  2>&1 | grep -v -i 'warn'

# 5. Slim: of flashinfer keep what the peers load (flashinfer_prebuild.py --keep-list) and
# data/aot; of tvm_ffi drop the sources, headers and test library (no compiling there).
"$VENV/bin/python" bench/peers/flashinfer_prebuild.py --keep-list "$CACHE/keep.txt"
rm -rf "$WHL/jit-workspace"
(
  cd "$SITE"
  find flashinfer -type f ! -path 'flashinfer/data/aot/*' | sort > "$CACHE/all.txt"
  sort "$CACHE/keep.txt" | comm -23 "$CACHE/all.txt" - | xargs -r rm -f
  find flashinfer -depth -type d -empty -delete
  rm -rf tvm_ffi/3rdparty tvm_ffi/src tvm_ffi/cython tvm_ffi/include tvm_ffi/share \
    tvm_ffi/CMakeLists.txt  # (lib/libtvm_ffi_testing.so stays: core links it)
  find . -name __pycache__ -type d -prune -exec rm -rf {} +
)

# 6. Check it from .whl/ alone: the import, the modules prebuilt, each .so loading.
STUB=$CACHE/libcuda-stub
mkdir -p "$STUB"
ln -sf "$CUDA_HOME/lib64/stubs/libcuda.so" "$STUB/libcuda.so.1"
unset FLASHINFER_WORKSPACE_BASE PYTHONPATH
# Every venv with torch in the cache (venv-cp312 made above; a venv-cp311 made by hand checks the
# cp311 tvm_ffi core too).
for v in "$CACHE"/venv-cp3*; do
  "$v/bin/python" -c "import torch" 2>/dev/null || continue
  say "check with $("$v/bin/python" --version)"
  env -u FLASHINFER_CUDA_ARCH_LIST LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$STUB" \
    "$v/bin/python" bench/peers/flashinfer_env.py --load
done
rm -rf "$WHL/workspace"
find "$SITE" -name __pycache__ -type d -prune -exec rm -rf {} +

# 7. Manifest and size.
{
  echo "flashinfer-python $FI_VERSION, $(basename "$tvm312" | cut -d- -f1-2) (cp311 + cp312), packed $(date -u +%Y-%m-%dT%H:%M:%SZ) by bench/peers/flashinfer_pack.sh"
  echo "nvcc: $("$CUDA_HOME/bin/nvcc" --version | tail -1); torch for the build: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "prebuilt sm_90a modules (site-packages/flashinfer/data/aot):"
  (cd "$SITE/flashinfer/data/aot" && du -b */*.so | awk '{sub(/\/.*/, "", $2); printf "  %6.2f MB  %s\n", $1 / 1e6, $2}')
  echo "total: $(du -sb "$WHL" | cut -f1) bytes ($(du -sh "$WHL" | cut -f1)), $(find "$WHL" -type f | wc -l) files"
} > "$WHL/MANIFEST.txt"
cat "$WHL/MANIFEST.txt"
say "done: carry .whl (with the device tool: carry [\".whl\", ...]); $(du -sh "$WHL" | cut -f1)"
