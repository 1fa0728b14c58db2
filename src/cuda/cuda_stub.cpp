#include <stdexcept>

#include "cuda/cuda_support.hpp"

namespace commux::cuda {

bool compiled() { return false; }

int deviceCount() { return 0; }

void whenStreamReaches(const c10::Stream& stream, std::function<void()> ready) {
  throw std::runtime_error("commux: this build has no CUDA support (torch was CPU-only when "
                           "commux was built); rebuild commux against a CUDA torch");
}

}  // namespace commux::cuda
