#pragma once
// A GPU stream as the core carries it: the device, and the stream's identity in its front
// end's terms (torch: c10's StreamId), which the CUDA unit turns into a cudaStream_t. The
// core never dereferences it; it only orders operations after it (engine/stream_waits.hpp)
// and hands it back to the front end for work done on the caller's behalf.
#include <cstdint>

namespace commux::core {

struct Stream {
  int device = -1;
  std::int64_t id = 0;
};

}  // namespace commux::core
