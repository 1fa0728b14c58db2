#pragma once
// What the CUDA unit offers the rest of commux. Only cuda_support.cpp (built when torch has
// CUDA) includes CUDA headers; cuda_stub.cpp stands in otherwise, so the library loads
// and runs with no GPU and no CUDA runtime.
namespace commux::cuda {

/// True when this build of commux compiled its CUDA unit.
bool compiled();
/// Number of CUDA devices visible now (0 without a driver or GPU).
int deviceCount();

}  // namespace commux::cuda
