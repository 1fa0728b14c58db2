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

bool cmaRead(pid_t pid, const void* remote, void* local, std::size_t bytes) noexcept {
  auto* to = static_cast<char*>(local);
  auto* from = static_cast<const char*>(remote);
  while (bytes > 0) {
    iovec l{to, bytes};
    iovec r{const_cast<char*>(from), bytes};
    const ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EFAULT;
      return false;
    }
    // Partial reads happen (the kernel caps one call); go on from where it stopped.
    to += n;
    from += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace commux::shm
