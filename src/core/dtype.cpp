#include "core/dtype.hpp"

namespace commux::core {

const char* nameOf(Dtype dtype) noexcept {
  switch (dtype) {
    case Dtype::UInt8: return "uint8";
    case Dtype::Int8: return "int8";
    case Dtype::Int16: return "int16";
    case Dtype::Int32: return "int32";
    case Dtype::Int64: return "int64";
    case Dtype::Float16: return "float16";
    case Dtype::BFloat16: return "bfloat16";
    case Dtype::Float32: return "float32";
    case Dtype::Float64: return "float64";
    case Dtype::Bool: return "bool";
    case Dtype::Complex64:
      return "complex64";
    case Dtype::Complex128:
      return "complex128";
  }
  return "?";
}

}  // namespace commux::core
