#pragma once
// What the core's real-rank tests share: a fresh folder for a test's key-value store, and
// one rank's engine and Group over it.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "directory_store.hpp"
#include "engine/engine.hpp"
#include "group/group.hpp"
#include "group/point_to_point.hpp"

namespace commux::testing {

inline void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// A fresh folder for one test's store; removed (with what the ranks wrote) at the end.
class Folder {
 public:
  Folder() {
    char path[] = "/tmp/commux-core-group-XXXXXX";
    check(::mkdtemp(path) != nullptr, "mkdtemp failed");
    path_ = path;
  }
  ~Folder() { std::system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One rank's engine and Group (the Group goes first: it needs the engine to leave).
struct Member {
  std::shared_ptr<engine::Engine> engine;
  std::unique_ptr<group::Group> group;

  Member(const std::string& folder, int rank, int size)
      : engine(std::make_shared<engine::Engine>(engine::Settings{})),
        group(std::make_unique<group::Group>(
            std::make_shared<DirectoryStore>(folder, std::chrono::seconds(30)), rank, size, engine,
            /*setUpInBackground=*/true)) {}
};

// Every rank sends a byte to the next and receives one from the one before: a rank leaves
// only once the one before it is done with what came earlier. A member that exits while
// another still finishes a collective fails that collective (its death is seen, and the
// collective cannot tell whether it still needed it); a message it sent is still received.
inline void leaveTogether(group::Group& g, int tag = 999) {
  const int next = (g.rank() + 1) % g.size();
  const int before = (g.rank() + g.size() - 1) % g.size();
  auto in = std::make_shared<std::uint8_t>(0);
  auto out = std::make_shared<std::uint8_t>(1);
  auto received = group::recv(g, core::bufferOf(in.get(), 1, core::Dtype::UInt8, in), before, tag,
                              std::chrono::seconds(30));
  auto sent = group::send(g, core::bufferOf(out.get(), 1, core::Dtype::UInt8, out), next, tag,
                          std::chrono::seconds(30));
  for (auto* request : {sent.get(), received.get()}) {
    request->wait(request->timeout());
    if (auto error = request->error()) std::rethrow_exception(error);
  }
}

}  // namespace commux::testing
