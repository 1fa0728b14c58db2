#!/usr/bin/env bash
# Builds the binary wheel into dist/: commux/lib/libcommux.so with $ORIGIN RPATHs (torch,
# the UCX wheel and the CUDA runtime are found next to it in site-packages), requiring the
# torch release it was built against (torch's C++ ABI is per release), the matching
# libucx-cuXX wheel, and numpy (torch warns on import without it). Prints the wheel's path.
#   scripts/build_wheel.sh            (run scripts/install.sh first: same build folder)
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
PY=${PYTHON:-python3}
"$PY" -c "import wheel" 2>/dev/null || "$PY" -m pip install --disable-pip-version-check -q wheel
rm -rf dist/raw && mkdir -p dist/raw
# The options of scripts/install.sh: the build folder is reused, nothing recompiles.
"$PY" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps -w dist/raw \
  -C cmake.define.COMMUX_BUILD_TESTS=ON . >&2
raw=$(ls dist/raw/commux-*.whl)
torch_version=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
ucx_wheel=$("$PY" - <<'PY'
import importlib.metadata as md
for name in ("libucx-cu13", "libucx-cu12"):
    try:
        md.version(name)
        print(name)
        break
    except md.PackageNotFoundError:
        pass
PY
)
# Pin the requirements in the wheel's metadata.
work=$(mktemp -d)
"$PY" -m wheel unpack -d "$work" "$raw" >&2
meta=$(ls "$work"/commux-*/commux-*.dist-info/METADATA)
"$PY" - "$meta" "$torch_version" "$ucx_wheel" <<'PY'
import sys
path, torch_version, ucx = sys.argv[1:]
lines = [l for l in open(path).read().split("\n") if not l.startswith("Requires-Dist: torch")]
at = next(i for i, l in enumerate(lines) if l == "")  # end of the headers
pins = [f"Requires-Dist: torch=={torch_version}", f"Requires-Dist: {ucx}", "Requires-Dist: numpy"]
lines[at:at] = pins
open(path, "w").write("\n".join(lines))
PY
mkdir -p dist
rm -f dist/commux-*.whl
"$PY" -m wheel pack -d dist "$work"/commux-* >&2
rm -rf "$work" dist/raw
ls dist/commux-*.whl
