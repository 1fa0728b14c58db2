#pragma once
#include <ucs/type/status.h>

#include <exception>
#include <string>

#include "core/error.hpp"

namespace commux::engine {

/// A communication failure (torch.distributed.DistBackendError through the torch adapter).
inline std::exception_ptr commError(const std::string& message) {
  return core::makeError(core::ErrorKind::Backend, message, COMMUX_SITE);
}

/// The statuses a transfer ends with when its connection broke (the peer's process or host
/// went away), as against this rank's own doing (a cancel) or a mismatch of the ranks' calls
/// (a truncated message).
inline bool brokenConnection(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_SHMEM_SEGMENT:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET:
      return true;
    default:
      return (status <= UCS_ERR_FIRST_LINK_FAILURE && status >= UCS_ERR_LAST_LINK_FAILURE) ||
             (status <= UCS_ERR_FIRST_ENDPOINT_FAILURE && status >= UCS_ERR_LAST_ENDPOINT_FAILURE);
  }
}

}  // namespace commux::engine
