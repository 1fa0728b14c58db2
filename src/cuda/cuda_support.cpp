#include <c10/cuda/CUDAFunctions.h>

#include "cuda/cuda_support.hpp"

namespace commux::cuda {

bool compiled() { return true; }

int deviceCount() { return static_cast<int>(c10::cuda::device_count()); }

}  // namespace commux::cuda
