// Registered ranges (UCX memory maps) and host memory this host's processes can map.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "capi/comm.hpp"
#include "core/error.hpp"

namespace commux::capi {
namespace {

// A registration holds the engine whose context mapped it: the map must be undone there.
struct Registration {
  std::shared_ptr<engine::Engine> engine;
  ucp_mem_h memory = nullptr;
};

struct Allocation {
  std::size_t size = 0;
};

std::mutex& tablesMutex() {
  static std::mutex m;
  return m;
}
std::map<void*, Allocation>& allocations() {
  static std::map<void*, Allocation> table;
  return table;
}
// The live registrations: a handle is checked against them before it is used.
std::map<void*, std::unique_ptr<Registration>>& registrations() {
  static std::map<void*, std::unique_ptr<Registration>> table;
  return table;
}

}  // namespace
}  // namespace commux::capi

using namespace commux;
using capi::guarded;

extern "C" {

commuxResult_t commuxCommRegister(commuxComm_t comm, void* buff, size_t size, void** handle) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(handle != nullptr, InvalidArgument, "commux: commuxCommRegister: handle is NULL");
    *handle = nullptr;
    COMMUX_CHECK(buff != nullptr && size > 0, InvalidArgument,
                 "commux: commuxCommRegister: nothing to register (buff ", buff, ", size ", size,
                 ")");
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = buff;
    params.length = size;
    auto registration = std::make_unique<capi::Registration>();
    registration->engine = c.engine;
    const ucs_status_t status = ucp_mem_map(c.engine->ucpContext(), &params, &registration->memory);
    COMMUX_CHECK(status == UCS_OK, Backend, "commux: commuxCommRegister: UCX could not map ",
                 size, " bytes at ", buff, ": ", ucs_status_string(status));
    void* key = registration.get();
    std::lock_guard<std::mutex> lock(capi::tablesMutex());
    capi::registrations()[key] = std::move(registration);
    *handle = key;
  });
}

commuxResult_t commuxCommDeregister(commuxComm_t comm, void* handle) {
  return guarded([&] {
    capi::checkComm(comm);
    COMMUX_CHECK(handle != nullptr, InvalidArgument, "commux: commuxCommDeregister: handle is NULL");
    std::unique_ptr<capi::Registration> registration;
    {
      std::lock_guard<std::mutex> lock(capi::tablesMutex());
      auto it = capi::registrations().find(handle);
      COMMUX_CHECK(it != capi::registrations().end(), InvalidArgument,
                   "commux: commuxCommDeregister: ", handle,
                   " is not a registration (or was deregistered already)");
      registration = std::move(it->second);
      capi::registrations().erase(it);
    }
    const ucs_status_t status =
        ucp_mem_unmap(registration->engine->ucpContext(), registration->memory);
    COMMUX_CHECK(status == UCS_OK, Backend, "commux: commuxCommDeregister: ",
                 ucs_status_string(status));
  });
}

commuxResult_t commuxMemAlloc(void** ptr, size_t size) {
  return guarded([&] {
    COMMUX_CHECK(ptr != nullptr, InvalidArgument, "commux: commuxMemAlloc: ptr is NULL");
    *ptr = nullptr;
    COMMUX_CHECK(size > 0, InvalidArgument, "commux: commuxMemAlloc: size is 0");
    const int fd = ::memfd_create("commux-mem", MFD_CLOEXEC);
    COMMUX_CHECK(fd >= 0, Runtime, "commux: commuxMemAlloc: memfd_create failed: ",
                 std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      const int error = errno;
      ::close(fd);
      COMMUX_FAIL(Runtime, "commux: commuxMemAlloc: cannot size ", size, " bytes: ",
                  std::strerror(error));
    }
    void* memory = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);  // the mapping keeps the memory
    COMMUX_CHECK(memory != MAP_FAILED, Runtime, "commux: commuxMemAlloc: cannot map ", size,
                 " bytes: ", std::strerror(error));
    std::lock_guard<std::mutex> lock(capi::tablesMutex());
    capi::allocations()[memory] = capi::Allocation{size};
    *ptr = memory;
  });
}

commuxResult_t commuxMemFree(void* ptr) {
  return guarded([&] {
    if (ptr == nullptr) return;
    std::size_t size = 0;
    {
      std::lock_guard<std::mutex> lock(capi::tablesMutex());
      auto it = capi::allocations().find(ptr);
      COMMUX_CHECK(it != capi::allocations().end(), InvalidArgument, "commux: commuxMemFree: ",
                   ptr, " was not returned by commuxMemAlloc (or was freed already)");
      size = it->second.size;
      capi::allocations().erase(it);
    }
    ::munmap(ptr, size);
  });
}

}  // extern "C"
