#include "shm/job.hpp"

namespace commux::shm {

const char* kindName(Kind kind) noexcept {
  switch (kind) {
    case Kind::Allreduce:
      return "allreduce";
    case Kind::Reduce:
      return "reduce";
    case Kind::Broadcast:
      return "broadcast";
    case Kind::Allgather:
      return "allgather";
    case Kind::Gather:
      return "gather";
    case Kind::Scatter:
      return "scatter";
    case Kind::ReduceScatter:
      return "reduce_scatter";
    case Kind::Alltoall:
      return "all_to_all";
    case Kind::Barrier:
      return "barrier";
    case Kind::Hold:
      return "hold";
  }
  return "?";
}

bool hasRoot(Kind kind) noexcept {
  return kind == Kind::Reduce || kind == Kind::Broadcast || kind == Kind::Gather ||
         kind == Kind::Scatter;
}

bool reduces(Kind kind) noexcept {
  return kind == Kind::Allreduce || kind == Kind::Reduce || kind == Kind::ReduceScatter;
}

std::uint64_t Job::blockCount() const {
  switch (kind) {
    case Kind::Allreduce:
    case Kind::Reduce:
    case Kind::Broadcast:
      return static_cast<std::uint64_t>(buffer.numel());
    case Kind::Allgather:
    case Kind::Gather:
      return static_cast<std::uint64_t>(input.numel());
    case Kind::Scatter:
    case Kind::ReduceScatter:
      return static_cast<std::uint64_t>(output.numel());
    case Kind::Alltoall:
    case Kind::Barrier:
    case Kind::Hold:
      return 0;
  }
  return 0;
}

at::ScalarType Job::dtype() const {
  if (buffer.defined()) return buffer.scalar_type();
  if (input.defined()) return input.scalar_type();
  if (output.defined()) return output.scalar_type();
  return at::kByte;
}

}  // namespace commux::shm
