#include "shm/cma.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <cerrno>

namespace commux::shm {
namespace {

const volatile std::uint64_t canary = kCmaCanaryValue;

}  // namespace

void allowReaders() noexcept {
#ifdef PR_SET_PTRACER
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

const std::uint64_t* cmaCanary() noexcept { return const_cast<const std::uint64_t*>(&canary); }

namespace {

template <bool kWrite>
bool cmaCopy(pid_t pid, char* local, char* remote, std::size_t bytes) noexcept {
  while (bytes > 0) {
    iovec l{local, bytes};
    iovec r{remote, bytes};
    const ssize_t n = kWrite ? ::process_vm_writev(pid, &l, 1, &r, 1, 0)
                             : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EFAULT;
      return false;
    }
    // Partial copies happen (the kernel caps one call); go on from where it stopped.
    local += n;
    remote += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

bool cmaRead(pid_t pid, const void* remote, void* local, std::size_t bytes) noexcept {
  return cmaCopy<false>(pid, static_cast<char*>(local),
                        const_cast<char*>(static_cast<const char*>(remote)), bytes);
}

bool cmaWrite(pid_t pid, void* remote, const void* local, std::size_t bytes) noexcept {
  return cmaCopy<true>(pid, const_cast<char*>(static_cast<const char*>(local)),
                       static_cast<char*>(remote), bytes);
}

}  // namespace commux::shm
