// What the torch adapter installs into the core as libcommux loads: every error the core
// raises is thrown as the c10 exception of its kind (so Python sees ValueError,
// DistBackendError, ... and c10d code that catches c10's types keeps working), c10's
// exceptions read back as the core's kinds, the core's messages go to c10's log, and
// host folds of tensors' memory use ATen's kernels where the core's would be slower or
// lack the type (c10d/aten_fold.hpp).
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include "core/error.hpp"
#include "core/fold.hpp"
#include "core/log.hpp"
#include "c10d/aten_fold.hpp"

namespace commux {
namespace {

std::exception_ptr toTorch(const core::Error& error) {
  const c10::SourceLocation where{error.site().function, error.site().file,
                                  static_cast<uint32_t>(error.site().line)};
  const std::string message = error.what();
  switch (error.kind()) {
    case core::ErrorKind::InvalidArgument:
      return std::make_exception_ptr(c10::ValueError(where, message));
    case core::ErrorKind::Backend:
      return std::make_exception_ptr(c10::DistBackendError(where, message));
    case core::ErrorKind::Network:
      return std::make_exception_ptr(c10::DistNetworkError(where, message));
    case core::ErrorKind::Store:
      return std::make_exception_ptr(c10::DistStoreError(where, message));
    case core::ErrorKind::Unsupported:
      return std::make_exception_ptr(c10::NotImplementedError(where, message));
    case core::ErrorKind::Runtime:
    case core::ErrorKind::Internal:
      break;
  }
  return std::make_exception_ptr(c10::Error(where, message));
}

// The way back: c10's types as the core's kinds (most derived first).
bool fromTorch(const std::exception_ptr& error, core::ErrorReading& reading) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::ValueError& e) {
    reading = {core::ErrorKind::InvalidArgument, e.what_without_backtrace()};
  } catch (const c10::DistNetworkError& e) {
    reading = {core::ErrorKind::Network, e.what_without_backtrace()};
  } catch (const c10::DistStoreError& e) {
    reading = {core::ErrorKind::Store, e.what_without_backtrace()};
  } catch (const c10::DistBackendError& e) {
    reading = {core::ErrorKind::Backend, e.what_without_backtrace()};
  } catch (const c10::NotImplementedError& e) {
    reading = {core::ErrorKind::Unsupported, e.what_without_backtrace()};
  } catch (const c10::Error& e) {
    reading = {core::ErrorKind::Runtime, e.what_without_backtrace()};
  } catch (...) {
    return false;
  }
  return true;
}

void toTorchLog(core::LogLevel level, const std::string& message) {
  if (level == core::LogLevel::Warning) {
    LOG(WARNING) << message;
  } else {
    LOG(INFO) << message;
  }
}

// Before any of libcommux's code can raise an error or log.
const bool installedTorchHooks = [] {
  core::setErrorFactory(&toTorch);
  core::setErrorReader(&fromTorch);
  core::setLogSink(&toTorchLog);
  core::setHostFold(&atenHostFold);
  return true;
}();

}  // namespace
}  // namespace commux
