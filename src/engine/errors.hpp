#pragma once
#include <exception>
#include <string>

#include "core/error.hpp"

namespace commux::engine {

/// A communication failure (torch.distributed.DistBackendError through the torch adapter).
inline std::exception_ptr commError(const std::string& message) {
  return core::makeError(core::ErrorKind::Backend, message, COMMUX_SITE);
}

}  // namespace commux::engine
