#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, a CUDA torch already installed and no
# internet, install the missing Python packages from wheel files (gpu-wheels/, made by
# scripts/gpu_wheels.sh), build commux, run the CUDA tests (2 ranks sharing the GPU) and the
# CUDA benchmark. Everything goes to $OUT/gpu_check.log (OUT defaults to ./gpu-check).
# Budget: under 8 minutes; each stage has its own time limit, and every test world at most
# COMMUX_TEST_TIMEOUT_MAX seconds, so that a hang cannot eat the rest of a short lease.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-gpu-check}
WHEELS=${COMMUX_WHEELS:-gpu-wheels}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
exec > >(tee "$LOG") 2>&1
start=$(date +%s)
stage() { echo; echo "== $1 ($(( $(date +%s) - start )) s)"; }
status=0

stage "machine"
nvidia-smi || echo "nvidia-smi: not available"
"$PY" - <<'PY'
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count())
PY

stage "python packages (offline, from $WHEELS)"
need=()
"$PY" -c "import libucx" 2>/dev/null || need+=("libucx-cu$("$PY" -c 'import torch; print((torch.version.cuda or "13").split(".")[0])')")
"$PY" -c "import scikit_build_core" 2>/dev/null || need+=(scikit-build-core)
"$PY" -c "import pytest, pytest_timeout" 2>/dev/null || need+=(pytest pytest-timeout)
# cmake and ninja only if the wheels are there (COMMUX_GPU_BUILD_TOOLS=1 gpu_wheels.sh).
command -v cmake >/dev/null || ! ls "$WHEELS"/cmake-*.whl >/dev/null 2>&1 || need+=(cmake)
command -v ninja >/dev/null || "$PY" -c "import ninja" 2>/dev/null || ! ls "$WHEELS"/ninja-*.whl >/dev/null 2>&1 || need+=(ninja)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  "$PY" -m pip install --disable-pip-version-check -q --no-index --find-links "$WHEELS" "${need[@]}" \
    || { echo "FAILED: could not install ${need[*]} from $WHEELS"; exit 1; }
fi

stage "build commux"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# The GPU image's compiler (CXX=/opt/gcc/bin/g++, a wrapper) links libstdc++ statically, which
# crashed commux beside torch's copy and which CMake now refuses: then take the distribution's.
links_shared() {
  printf '#include <sstream>\nint f() { std::istringstream s("1"); int x; s >> x; return x; }\n' \
    > /tmp/commux_probe.cpp &&
    "$1" -shared -fPIC -o /tmp/commux_probe.so /tmp/commux_probe.cpp 2>/dev/null &&
    readelf -d /tmp/commux_probe.so | grep -q 'libstdc++'
}
if ! links_shared "${CXX:-g++}" && [ -x /usr/bin/g++ ] && links_shared /usr/bin/g++; then
  echo "${CXX:-g++} links libstdc++ statically: building with /usr/bin/g++"
  export CXX=/usr/bin/g++ CC=/usr/bin/gcc
fi
echo "compiler: ${CXX:-$(command -v g++)} ($("${CXX:-g++}" -dumpfullversion 2>/dev/null))"
if command -v g++ >/dev/null && command -v cmake >/dev/null; then
  # Release without the C++ benchmark: the lease is short, and nothing here debugs the build.
  timeout "${COMMUX_GPU_BUILD_S:-240}" "$PY" -m pip install --disable-pip-version-check -q \
    --no-build-isolation --no-deps --config-settings=cmake.build-type=Release \
    --config-settings=cmake.define.COMMUX_BUILD_BENCH=OFF . \
    || { echo "FAILED: build"; exit 1; }
else
  # No compiler here: the wheel gpu_wheels.sh built (for the torch named beside it).
  echo "no g++/cmake: installing the prebuilt commux wheel (built against torch $(cat "$WHEELS/built-against-torch.txt" 2>/dev/null || echo '?'))"
  "$PY" -m pip install --disable-pip-version-check -q --no-index --no-deps --find-links "$WHEELS" commux \
    || { echo "FAILED: no compiler and no prebuilt commux wheel in $WHEELS"; exit 1; }
fi
(cd / && "$PY" -c "import commux; e = commux.load_extension(); print('commux', commux.__version__, 'cuda compiled', e.cuda_compiled(), 'devices', e.cuda_device_count(), 'ucx', e.ucx_version())")

# Which UCX transports see the GPU (cuda_copy, cuda_ipc) decides how ranks move CUDA memory.
(cd / && "$PY" - <<'PY'
import glob, os, subprocess, libucx
libucx.load_library()
root = os.path.dirname(libucx.__file__)
tools = glob.glob(os.path.join(root, "**", "ucx_info"), recursive=True)
if tools:
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(root, "lib"))
    out = subprocess.run([tools[0], "-d"], capture_output=True, text=True, timeout=30, env=env).stdout
    print("ucx transports:", sorted({l.split(":")[1].strip() for l in out.splitlines() if "Transport:" in l}))
else:
    print("ucx_info: not in the wheel")
PY
) || true

stage "CUDA tests"
COMMUX_TEST_TIMEOUT_MAX=${COMMUX_TEST_TIMEOUT_MAX:-60} timeout "${COMMUX_GPU_TESTS_S:-200}" \
  "$PY" -m pytest tests/python/test_cuda.py -v -rs -p no:cacheprovider --durations=0 || status=1

stage "the C API on device memory (libcommux_core without torch, commux's own fold kernels)"
# Its own build and time limit: a toolkit this machine lacks skips it, and nothing here can
# stop the stages around it.
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [ -z "$NVCC" ]; then
  echo "SKIPPED: no nvcc on this machine"
else
  core_build=build/gpu-core
  UCX_ROOT=$("$PY" -c "import libucx, os; print(os.path.dirname(libucx.__file__))")
  cuda_home=$(dirname "$(dirname "$NVCC")")
  if timeout "${COMMUX_GPU_CORE_BUILD_S:-150}" bash -c "
      cmake -S . -B $core_build -DCOMMUX_WITH_TORCH=OFF -DCOMMUX_CORE_CUDA=ON \
        -DCMAKE_CUDA_COMPILER=$NVCC -DCMAKE_BUILD_TYPE=Release -DUCX_ROOT=$UCX_ROOT >/dev/null &&
      cmake --build $core_build --target commux_core -j$(nproc) >/dev/null &&
      cc -std=c99 -O1 -Wall -o $core_build/capi_cuda tests/c/capi_cuda.c -Iinclude \
        -I$cuda_home/include -L$core_build -lcommux_core -L$cuda_home/lib64 -lcudart \
        -Wl,-rpath,$PWD/$core_build -Wl,-rpath,$cuda_home/lib64"; then
    for mode in refusals device; do
      timeout "${COMMUX_GPU_CORE_TEST_S:-120}" "$core_build/capi_cuda" --mode $mode --ranks 2 \
        --deadline 100 || status=1
    done
  else
    echo "FAILED: the torch-free build with CUDA"
    status=1
  fi
fi

stage "CUDA benchmark"
timeout "${COMMUX_GPU_BENCH_S:-75}" "$PY" benchmarks/cuda_bench.py --out "$OUT" --max-bytes 64M --iters 10 || status=1

stage "done: status $status"
exit $status
