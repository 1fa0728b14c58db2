#include "shm/cma.hpp"

#include <sys/prctl.h>
#include <sys/random.h>
#include <unistd.h>
#include <sys/uio.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <mutex>
#include <new>
#include <vector>

namespace commux::shm {
void allowReaders() noexcept {
#ifdef PR_SET_PTRACER
  static std::once_flag once;
  std::call_once(once, [] { ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); });
#endif
}

std::shared_ptr<const std::uint64_t> freshCmaCanary() {
  std::uint64_t value = 0;
  while (value == 0) {
    if (::getrandom(&value, sizeof(value), 0) != static_cast<ssize_t>(sizeof(value))) {
      value = static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull ^
              static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&value));
    }
  }
  return std::make_shared<const std::uint64_t>(value);
}

namespace {

// Up to IOV_MAX entries of `list` from entry `at`, the first `skip` bytes of it done.
std::size_t window(const iovec* list, std::size_t count, std::size_t at, std::size_t skip,
                   std::vector<iovec>& out) {
  const std::size_t n = std::min<std::size_t>(count - at, IOV_MAX);
  out.assign(list + at, list + at + n);
  out[0].iov_base = static_cast<char*>(out[0].iov_base) + skip;
  out[0].iov_len -= skip;
  return n;
}

// Moves the cursor (entry `at`, `skip` bytes into it) on by `bytes`, past empty entries.
void advance(const iovec* list, std::size_t count, std::size_t& at, std::size_t& skip,
             std::size_t bytes) {
  while (bytes > 0 && at < count) {
    const std::size_t left = list[at].iov_len - skip;
    if (bytes < left) {
      skip += bytes;
      return;
    }
    bytes -= left;
    ++at;
    skip = 0;
  }
  while (at < count && list[at].iov_len == 0) ++at;
}

// Both directions: `remote` is the other process's memory, read into or written from
// `local`. The kernel takes IOV_MAX entries a call and may stop short of what it was given
// (it caps one call): each call goes on from where the last stopped.
template <bool kWrite>
bool cmaCopy(pid_t pid, const iovec* local, std::size_t localCount, const iovec* remote,
             std::size_t remoteCount) noexcept {
  std::size_t li = 0, lskip = 0, ri = 0, rskip = 0;
  advance(local, localCount, li, lskip, 0);
  advance(remote, remoteCount, ri, rskip, 0);
  // The usual case: one call over the lists as they are; copies of a window otherwise.
  thread_local std::vector<iovec> lw, rw;
  try {
    while (li < localCount && ri < remoteCount) {
      const iovec* l = local + li;
      const iovec* r = remote + ri;
      std::size_t ln = localCount - li, rn = remoteCount - ri;
      if (lskip != 0 || ln > IOV_MAX) {
        ln = window(local, localCount, li, lskip, lw);
        l = lw.data();
      }
      if (rskip != 0 || rn > IOV_MAX) {
        rn = window(remote, remoteCount, ri, rskip, rw);
        r = rw.data();
      }
      const ssize_t n = kWrite ? ::process_vm_writev(pid, l, ln, r, rn, 0)
                               : ::process_vm_readv(pid, l, ln, r, rn, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      if (n == 0) {
        errno = EFAULT;
        return false;
      }
      advance(local, localCount, li, lskip, static_cast<std::size_t>(n));
      advance(remote, remoteCount, ri, rskip, static_cast<std::size_t>(n));
    }
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return false;
  }
  return true;
}

}  // namespace

bool cmaReadv(pid_t pid, const iovec* local, std::size_t localCount, const iovec* remote,
              std::size_t remoteCount) noexcept {
  return cmaCopy<false>(pid, local, localCount, remote, remoteCount);
}

bool cmaRead(pid_t pid, const void* remote, void* local, std::size_t bytes) noexcept {
  const iovec l{local, bytes};
  const iovec r{const_cast<void*>(remote), bytes};
  return cmaCopy<false>(pid, &l, 1, &r, 1);
}

bool cmaWrite(pid_t pid, void* remote, const void* local, std::size_t bytes) noexcept {
  const iovec l{const_cast<void*>(local), bytes};
  const iovec r{remote, bytes};
  return cmaCopy<true>(pid, &l, 1, &r, 1);
}

}  // namespace commux::shm
