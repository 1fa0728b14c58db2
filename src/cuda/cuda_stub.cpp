#include "cuda/cuda_support.hpp"

namespace commux::cuda {

bool compiled() { return false; }

int deviceCount() { return 0; }

}  // namespace commux::cuda
