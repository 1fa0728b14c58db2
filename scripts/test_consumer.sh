#!/usr/bin/env bash
# C++ consumers of commux: the project in tests/consumer, copied outside the repository
# with the halo example (examples/cpp/halo), builds test_commux and halo against
# commux::commux three ways, and runs both on 2 and 3 ranks each time:
#   1. find_package(commux) on the installed wheel layout (python3 -m commux.info --cmake-prefix)
#   2. FetchContent of this repository at HEAD (what is committed), which also installs
#      commux into a plain prefix (build/commux-prefix) with `cmake --install`
#   3. find_package(commux) on that plain prefix
# and the C API shipped in the wheel: examples/c through its commux.pc, examples/cpp_core
# through find_package(commux)'s commux::core, each on 2 and 3 ranks.
# Run scripts/install.sh first. Every run has a hard time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
PY=${PYTHON:-python3}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

run_both() {
  local dir=$1
  for n in 2 3; do
    echo "-- $dir: test_commux --spawn $n"
    timeout 180 "$dir/test_commux" --spawn "$n"
  done
  echo "-- $dir: test_commux --spawn 3 with COMMUX_COALESCE=1 COMMUX_GROUP=1"
  COMMUX_COALESCE=1 COMMUX_GROUP=1 timeout 180 "$dir/test_commux" --spawn 3
  echo "-- $dir: COMMUX_BENCH=1 COMMUX_BENCH_V=4 test_commux --spawn 2"
  COMMUX_BENCH=1 COMMUX_BENCH_V=4 timeout 180 "$dir/test_commux" --spawn 2
  for n in 2 3; do
    echo "-- $dir: halo on $n ranks (torchrun)"
    timeout 180 "$PY" -m torch.distributed.run --standalone --nproc-per-node "$n" \
      --no-python "$dir/halo/halo" 500 100
  done
}

# The consumer's sources live outside the repository, as a user's project would.
src=$(mktemp -d)/consumer
mkdir -p "$src"
cp tests/consumer/CMakeLists.txt tests/consumer/test_commux.cpp "$src"/
cp -r examples/cpp/halo "$src"/halo
trap 'rm -rf "$(dirname "$src")"' EXIT
# Fresh build folders (their caches name the source folder); the fetched commux lands at
# the same path each time, so ccache still serves its objects.
rm -rf build/consumer-package build/consumer-fetch build/consumer-prefix

configure() {
  cmake -S "$src" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    --no-warn-unused-cli -DPython3_EXECUTABLE="$(command -v "$PY")" "$@" >/dev/null
}

prefix=$("$PY" -m commux.info --cmake-prefix)
echo "== consumer 1: find_package(commux) in the installed package ($prefix)"
configure -B build/consumer-package -DCOMMUX_VIA=package -DCMAKE_PREFIX_PATH="$prefix"
cmake --build build/consumer-package
run_both build/consumer-package

echo "== consumer 2: FetchContent of $(git rev-parse --short HEAD), installed into build/commux-prefix"
configure -B build/consumer-fetch -DCOMMUX_VIA=fetch -DCOMMUX_GIT_REPOSITORY="$PWD" \
  -DCOMMUX_GIT_TAG="$(git rev-parse HEAD)" -DCOMMUX_INSTALL=ON
cmake --build build/consumer-fetch
run_both build/consumer-fetch
rm -rf build/commux-prefix
cmake --install build/consumer-fetch/_deps/commux-build --prefix build/commux-prefix >/dev/null

echo "== consumer 3: find_package(commux) in the plain prefix build/commux-prefix"
configure -B build/consumer-prefix -DCOMMUX_VIA=package -DCMAKE_PREFIX_PATH="$PWD/build/commux-prefix"
cmake --build build/consumer-prefix
run_both build/consumer-prefix
echo "== consumer 4: the C API in the installed package ($prefix): pkg-config, commux::core"
capi=$(mktemp -d)
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" sh -c \
  'cc -std=c99 -Wall -Werror examples/c/allreduce.c $(pkg-config --cflags --libs commux) -o "$0"' \
  "$capi/allreduce"
cmake -S examples/cpp_core -B "$capi/cpp" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$capi/cpp"
for n in 2 3; do
  scripts/run_ranks.sh "$n" "$capi/allreduce"
  scripts/run_ranks.sh "$n" "$capi/cpp/neighbours"
done
rm -rf "$capi"
echo "== consumers: all passed"
