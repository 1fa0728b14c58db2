// Result codes and the thread's last error: every C entry point ends here when it fails.
#include <new>
#include <string>

#include "capi/comm.hpp"
#include "core/error.hpp"

namespace commux::capi {
namespace {

thread_local std::string lastError;

commuxResult_t codeOf(const core::ErrorReading& reading) {
  switch (reading.kind) {
    case core::ErrorKind::InvalidArgument:
      return commuxInvalidArgument;
    case core::ErrorKind::Runtime:
      return commuxInvalidUsage;
    case core::ErrorKind::Backend:
      // The engine's timeouts are Backend errors in gloo's words ("Timed out waiting ...
      // (timed out after N ms)"), which torch's users match on; the C API gives them a
      // code of their own.
      return reading.message.find(" (timed out after ") != std::string::npos ? commuxTimeout
                                                                              : commuxRemoteError;
    case core::ErrorKind::Network:
    case core::ErrorKind::Store:
      return commuxSystemError;
    case core::ErrorKind::Unsupported:
      return commuxUnsupported;
    case core::ErrorKind::Internal:
      return commuxInternalError;
  }
  return commuxInternalError;
}

}  // namespace

commuxResult_t failWith(commuxResult_t result, const std::string& message) noexcept {
  try {
    lastError = message;
  } catch (...) {
    // No memory for the message: the code still says what kind of failure it was.
  }
  return result;
}

commuxResult_t translateCurrent() noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return failWith(commuxSystemError, "commux: out of memory");
  } catch (...) {
    try {
      const core::ErrorReading reading = core::readError(std::current_exception());
      return failWith(codeOf(reading), reading.message);
    } catch (...) {
      return failWith(commuxInternalError, "commux: an error that could not be read");
    }
  }
}

}  // namespace commux::capi

extern "C" {

const char* commuxGetErrorString(commuxResult_t result) {
  switch (result) {
    case commuxSuccess:
      return "no error";
    case commuxInvalidArgument:
      return "invalid argument";
    case commuxInvalidUsage:
      return "invalid usage";
    case commuxRemoteError:
      return "remote process failed or disagreed";
    case commuxSystemError:
      return "system or bootstrap error";
    case commuxUnsupported:
      return "unsupported";
    case commuxInternalError:
      return "internal error";
    case commuxInProgress:
      return "in progress";
    case commuxTimeout:
      return "timed out";
  }
  return "unknown result code";
}

const char* commuxGetLastError(commuxComm_t) { return commux::capi::lastError.c_str(); }

commuxResult_t commuxGetVersion(int* version) {
  if (version == nullptr) {
    return commux::capi::failWith(commuxInvalidArgument, "commux: commuxGetVersion: version is NULL");
  }
  *version = COMMUX_VERSION_CODE;
  return commuxSuccess;
}

}  // extern "C"
