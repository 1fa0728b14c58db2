#include "ucx/status.hpp"

namespace commux::ucx {

UcxError::UcxError(ucs_status_t status, const std::string& what)
    : std::runtime_error(what + ": " + ucs_status_string(status)), status_(status) {}

void throwStatus(ucs_status_t status, const std::string& what) { throw UcxError(status, what); }

}  // namespace commux::ucx
