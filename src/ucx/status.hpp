#pragma once
// UCX status codes become typed C++ exceptions carrying what was being attempted.
#include <ucs/type/status.h>

#include <stdexcept>
#include <string>

namespace commux::ucx {

class UcxError : public std::runtime_error {
 public:
  UcxError(ucs_status_t status, const std::string& what);
  ucs_status_t status() const noexcept { return status_; }

 private:
  ucs_status_t status_;
};

[[noreturn]] void throwStatus(ucs_status_t status, const std::string& what);

inline void check(ucs_status_t status, const char* what) {
  if (status != UCS_OK) throwStatus(status, what);
}

}  // namespace commux::ucx
