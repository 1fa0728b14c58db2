#include "core/fold.hpp"

#include <atomic>

#include "core/error.hpp"

namespace commux::core {
namespace {
std::atomic<HostFold> installedFold{nullptr};
}  // namespace

void setHostFold(HostFold fold) noexcept { installedFold.store(fold, std::memory_order_release); }

void fold(void* out, const void* a, const void* b, std::size_t count, const Buffer& like,
          ReduceOp op) {
  if (const HostFold installed = installedFold.load(std::memory_order_acquire)) {
    if (installed(out, a, b, count, like, op)) return;
  }
  COMMUX_CHECK(reduce(out, a, b, count, like.dtype, op), InvalidArgument, "commux: ", nameOf(op),
               " is not defined on ", typeCodeName(typeCode(like)));
}

}  // namespace commux::core
