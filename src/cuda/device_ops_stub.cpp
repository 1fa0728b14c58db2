// The device operations of a build without them (no CUDA toolkit, or torch's adapter,
// which moves CUDA tensors its own way): every pointer is host memory, the rest refuses.
#include "core/error.hpp"
#include "cuda/device_ops.hpp"

namespace commux::cuda {
namespace {

[[noreturn]] void noDeviceOps() {
  COMMUX_FAIL(Unsupported,
              "commux: this build of the core has no CUDA device support (libcommux_core was "
              "built without a CUDA toolkit; rebuild it with one, COMMUX_CORE_CUDA=ON)");
}

}  // namespace

bool deviceOpsCompiled() noexcept { return false; }

std::optional<int> deviceOf(const void*) { return std::nullopt; }

DeviceMemory::DeviceMemory(int, std::size_t) { noDeviceOps(); }
DeviceMemory::~DeviceMemory() = default;

OwnStream::OwnStream(int) { noDeviceOps(); }
OwnStream::~OwnStream() = default;

void copyOnStream(void*, const void*, std::size_t, const core::Stream&) { noDeviceOps(); }

void foldOnStream(void*, const void*, const void*, std::size_t, core::Dtype, core::ReduceOp,
                  const core::Stream&) {
  noDeviceOps();
}

}  // namespace commux::cuda
