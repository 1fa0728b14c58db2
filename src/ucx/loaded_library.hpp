#pragma once
// The UCX picked at run time (COMMUX_UCX_HOME, LD_LIBRARY_PATH, the wheel), which may be
// another release than the headers commux was built with.
#include <string>

namespace commux::ucx {

/// The oldest UCX commux runs on (Debian 12's libucx0; tests/python/test_system_ucx.py).
constexpr unsigned kOldestMajor = 1;
constexpr unsigned kOldestMinor = 13;

/// "major.minor.release" of the libucp loaded now.
std::string loadedVersion();
/// Path of the libucp loaded now ("" if unknown).
std::string loadedLibraryPath();
/// Throws, naming the library and both versions, when the loaded UCX is older than
/// kOldestMajor.kOldestMinor, instead of failing somewhere inside UCX.
void checkLoadedVersion();

}  // namespace commux::ucx
