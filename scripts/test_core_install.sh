#!/usr/bin/env bash
# An install of the torch-free build, used as a user would: the C example built with
# pkg-config, the C++ example with find_package(commux) (commux::core), each run as real
# ranks meeting through COMMUX_BOOTSTRAP; then the Rust crate (bindings/rust), built against
# the install through pkg-config, with its real-rank tests of every CommBackend method.
# Takes the build folder (default build/core-only, made by scripts/test_core.sh). No torch
# or Python is involved.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/core-only}
work=$(mktemp -d /tmp/commux-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
clean_env=(env -i PATH=/usr/bin:/bin HOME="$HOME")

"${clean_env[@]}" cmake --install "$build" --prefix "$work/prefix" >/dev/null
pc=$(find "$work/prefix" -name commux.pc)
[ -n "$pc" ] || { echo "no commux.pc in the install" >&2; exit 1; }
linked=$(find "$work/prefix" -name '*.so*' -type f -exec ldd {} \;)
if grep -E '^\s*lib(torch|c10|python)' <<<"$linked"; then
  echo "the install links torch or Python" >&2
  exit 1
fi

echo "== C, through pkg-config"
"${clean_env[@]}" PKG_CONFIG_PATH="$(dirname "$pc")" sh -c \
  'cc -std=c99 -Wall -Werror examples/c/allreduce.c $(pkg-config --cflags --libs commux) -o "$0"' \
  "$work/allreduce"
echo "== C++, through find_package(commux)"
"${clean_env[@]}" cmake -S examples/cpp_core -B "$work/cpp" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
"${clean_env[@]}" cmake --build "$work/cpp" >/dev/null

"${clean_env[@]}" scripts/run_ranks.sh 2 "$work/allreduce"
"${clean_env[@]}" scripts/run_ranks.sh 4 "$work/allreduce"
"${clean_env[@]}" scripts/run_ranks.sh 3 "$work/cpp/neighbours"
echo "== Rust: the crate's tests against the install (cargo test, offline)"
cargo=$(command -v cargo || true)
[ -n "$cargo" ] || cargo="$HOME/.cargo/bin/cargo"
[ -x "$cargo" ] || { echo "no cargo: install Rust (Debian: apt-get install cargo)" >&2; exit 1; }
"${clean_env[@]}" PATH="$(dirname "$cargo"):/usr/bin:/bin" PKG_CONFIG_PATH="$(dirname "$pc")" \
  CARGO_TARGET_DIR="$PWD/build/rust-target" \
  "$cargo" test --offline --quiet --manifest-path bindings/rust/Cargo.toml
echo "== Rust: a dependent crate (tests/rust_consumer) outside the repository, run with nothing set"
cp -r tests/rust_consumer "$work/rust_consumer"
rm -rf "$work/rust_consumer/target" "$work/rust_consumer/Cargo.lock"
sed -i "s#path = \"../../bindings/rust\"#path = \"$PWD/bindings/rust\"#" "$work/rust_consumer/Cargo.toml"
grep -qF "path = \"$PWD/bindings/rust\"" "$work/rust_consumer/Cargo.toml"
consumer_cargo=("${clean_env[@]}" PATH="$(dirname "$cargo"):/usr/bin:/bin" PKG_CONFIG_PATH="$(dirname "$pc")"
  CARGO_TARGET_DIR="$work/rust_consumer/target" "$cargo")
"${consumer_cargo[@]}" test --offline --quiet --manifest-path "$work/rust_consumer/Cargo.toml"
consumer_test=$("${consumer_cargo[@]}" test --offline --no-run --manifest-path "$work/rust_consumer/Cargo.toml" 2>&1 |
  sed -n 's/.*Executable tests\/consumer.rs (\(.*\))/\1/p')
[ -x "$consumer_test" ] || { echo "cannot find the Rust consumer's test binary" >&2; exit 1; }
"${clean_env[@]}" "$consumer_test" --quiet  # not through cargo: no LD_LIBRARY_PATH of its own

# Across two "hosts" (Linux namespaces, scripts/multihost_check.sh): the C test's every call
# and the Rust crate's every method, 2 ranks per host, UCX over TCP between the hosts.
if [ "$(id -u)" = 0 ] && ip netns list >/dev/null 2>&1; then
  echo "== across two namespace hosts: C and Rust"
  scripts/multihost_check.sh --hosts 2 --timeout 180 \
    --exec "$PWD/$build/tests/c/commux_capi_ranks --rank-from-env"
  ranks_test=$("${clean_env[@]}" PATH="$(dirname "$cargo"):/usr/bin:/bin" \
    PKG_CONFIG_PATH="$(dirname "$pc")" CARGO_TARGET_DIR="$PWD/build/rust-target" \
    "$cargo" test --offline --no-run --manifest-path bindings/rust/Cargo.toml 2>&1 |
    sed -n 's/.*Executable tests\/ranks.rs (\(.*\))/\1/p')
  [ -x "$ranks_test" ] || { echo "cannot find the Rust ranks test binary" >&2; exit 1; }
  scripts/multihost_check.sh --hosts 2 --timeout 180 \
    --exec "env COMMUX_RUST_TEST_RANK=1 $ranks_test every_method_at_2_ranks --exact --nocapture --test-threads=1"
else
  echo "== across namespace hosts: skipped (needs root and ip netns)"
fi
echo "the torch-free install works from C, C++ and Rust"
