// One-sided windows (group/window.hpp) behind the C API's handles.
#include <memory>

#include "capi/comm.hpp"
#include "core/error.hpp"
#include "group/window.hpp"

struct commuxWin {
  commuxComm* comm = nullptr;
  std::unique_ptr<commux::group::Window> window;
};

namespace commux::capi {
namespace {

commuxWin& checkWin(commuxWin_t win, const char* what) {
  COMMUX_CHECK(win != nullptr && win->window != nullptr, InvalidArgument, "commux: ", what,
               ": the window is NULL");
  return *win;
}

}  // namespace
}  // namespace commux::capi

using namespace commux;
using capi::guarded;

extern "C" {

commuxResult_t commuxWinCreate(commuxComm_t comm, void* base, size_t bytes, commuxWin_t* win) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(win != nullptr, InvalidArgument, "commux: commuxWinCreate: win is NULL");
    *win = nullptr;
    const std::uint64_t index = c.windows++;
    auto made = std::make_unique<commuxWin>();
    made->comm = &c;
    made->window = std::make_unique<group::Window>(*c.group, base, bytes, index);
    *win = made.release();
  });
}

commuxResult_t commuxWinPut(commuxWin_t win, const void* data, size_t bytes, int target,
                            size_t offset) {
  return guarded([&] {
    auto& w = capi::checkWin(win, "commuxWinPut");
    auto request = w.window->put(data, bytes, target, offset, false, capi::timeoutOf(w.comm));
    capi::waitFor(*w.comm, *request);
  });
}

commuxResult_t commuxWinPutSignal(commuxWin_t win, const void* data, size_t bytes, int target,
                                  size_t offset) {
  return guarded([&] {
    auto& w = capi::checkWin(win, "commuxWinPutSignal");
    auto request = w.window->put(data, bytes, target, offset, true, capi::timeoutOf(w.comm));
    capi::waitFor(*w.comm, *request);
  });
}

commuxResult_t commuxWinSignal(commuxWin_t win, int target) {
  return guarded([&] {
    auto& w = capi::checkWin(win, "commuxWinSignal");
    capi::waitFor(*w.comm, *w.window->signal(target, capi::timeoutOf(w.comm)));
  });
}

commuxResult_t commuxWinWaitSignal(commuxWin_t win, int source) {
  return guarded([&] {
    auto& w = capi::checkWin(win, "commuxWinWaitSignal");
    capi::waitFor(*w.comm, *w.window->waitSignal(source, capi::timeoutOf(w.comm)));
  });
}

commuxResult_t commuxWinFlush(commuxWin_t win, int target) {
  return guarded([&] {
    auto& w = capi::checkWin(win, "commuxWinFlush");
    capi::waitFor(*w.comm, *w.window->flush(target, capi::timeoutOf(w.comm)));
  });
}

commuxResult_t commuxWinFree(commuxWin_t win) {
  if (win == nullptr) return commuxSuccess;
  const commuxResult_t result = guarded([&] {
    if (win->window) win->window->close(capi::timeoutOf(win->comm));
  });
  delete win;
  return result;
}

}  // extern "C"
