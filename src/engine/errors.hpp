#pragma once
#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace commux::engine {

/// A communication failure as torch reports them (torch.distributed.DistBackendError).
inline std::exception_ptr commError(const std::string& message) {
  return std::make_exception_ptr(
      c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
}

}  // namespace commux::engine
