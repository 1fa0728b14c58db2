#pragma once
// Cross Memory Attach: copying straight out of another process's memory
// (process_vm_readv), so a large shared-memory collective moves each byte once instead of
// twice through the segment's slots. The kernel allows it between processes of one user
// unless Yama's ptrace_scope forbids it; allowReaders() lifts that for this process, as
// Open MPI does, and the group probes that every rank can read its neighbour before it
// relies on it.
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace commux::shm {

/// Lets any process of this user read this one's memory under Yama ptrace_scope 1 (a
/// no-op where Yama is absent). Asked of the kernel once per process, however often called.
void allowReaders() noexcept;

/// A word holding a fresh random value, for one probe: the prober publishes its address
/// and value, and keeps it until the readers are done. Finding that value there proves the
/// reader reads the process that published it now, not any process that happens to hold a
/// well-known constant at that address.
std::shared_ptr<const std::uint64_t> freshCmaCanary();

/// Copies `bytes` from `remote` in process `pid` to `local`; false (errno set) when the
/// kernel refuses or the process is gone.
bool cmaRead(pid_t pid, const void* remote, void* local, std::size_t bytes) noexcept;
/// Copies the bytes of `remote` (iovecs of process `pid`) into `local`, in order, both lists
/// holding the same number of bytes however they are cut and however many entries they
/// have (the kernel takes IOV_MAX a call, and a call may stop short); false (errno set) as
/// cmaRead.
bool cmaReadv(pid_t pid, const iovec* local, std::size_t localCount, const iovec* remote,
              std::size_t remoteCount) noexcept;
/// Copies `bytes` from `local` to `remote` in process `pid` (a window's put); as cmaRead.
bool cmaWrite(pid_t pid, void* remote, const void* local, std::size_t bytes) noexcept;

}  // namespace commux::shm
