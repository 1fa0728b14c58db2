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
      return buffer.count;
    case Kind::Allgather:
    case Kind::Gather:
      return input.count;
    case Kind::Scatter:
    case Kind::ReduceScatter:
      return output.count;
    case Kind::Alltoall:
    case Kind::Barrier:
    case Kind::Hold:
      return 0;
  }
  return 0;
}

const core::Buffer& Job::typed() const noexcept {
  if (buffer.present()) return buffer;
  if (input.present()) return input;
  return output;
}

}  // namespace commux::shm
