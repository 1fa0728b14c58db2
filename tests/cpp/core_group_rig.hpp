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
#include <vector>

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

// No rank leaves before every rank got here: each tells rank 0 it is done, and leaves once
// rank 0 has heard from all and said so. (A ring is not enough: a rank leaves once the one
// before it is done, while the one after it may still be working, and a member that exits
// then fails what that one still does with it, its health check included.) A message a
// leaving rank sent is still received.
inline void leaveTogether(group::Group& g, int tag = 999) {
  auto token = std::make_shared<std::uint8_t>(1);
  const auto view = core::bufferOf(token.get(), 1, core::Dtype::UInt8, token);
  const auto finish = [](group::Request& request) {
    request.wait(request.timeout());
    if (auto error = request.error()) std::rethrow_exception(error);
  };
  if (g.rank() == 0) {
    for (int r = 1; r < g.size(); ++r) {
      auto in = std::make_shared<std::uint8_t>(0);
      finish(*group::recv(g, core::bufferOf(in.get(), 1, core::Dtype::UInt8, in), r, tag,
                          std::chrono::seconds(30)));
    }
    std::vector<std::shared_ptr<group::Request>> sent;
    for (int r = 1; r < g.size(); ++r) {
      sent.push_back(group::send(g, view, r, tag + 1, std::chrono::seconds(30)));
    }
    for (auto& request : sent) finish(*request);
    return;
  }
  finish(*group::send(g, view, 0, tag, std::chrono::seconds(30)));
  auto go = std::make_shared<std::uint8_t>(0);
  finish(*group::recv(g, core::bufferOf(go.get(), 1, core::Dtype::UInt8, go), 0, tag + 1,
                      std::chrono::seconds(30)));
}

}  // namespace commux::testing
