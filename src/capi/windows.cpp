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

// Starts an operation on the window (`start` gets the window and the communicator's
// timeout and returns its Request) and waits for it.
template <typename Start>
commuxResult_t onWindow(commuxWin_t win, const char* what, Start&& start) {
  return guarded([&] {
    COMMUX_CHECK(win != nullptr && win->window != nullptr, InvalidArgument, "commux: ", what,
                 ": the window is NULL");
    waitFor(*win->comm, *start(*win->window, timeoutOf(win->comm)));
  });
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
  return capi::onWindow(win, "commuxWinPut", [&](group::Window& w, auto timeout) {
    return w.put(data, bytes, target, offset, false, timeout);
  });
}

commuxResult_t commuxWinPutSignal(commuxWin_t win, const void* data, size_t bytes, int target,
                                  size_t offset) {
  return capi::onWindow(win, "commuxWinPutSignal", [&](group::Window& w, auto timeout) {
    return w.put(data, bytes, target, offset, true, timeout);
  });
}

commuxResult_t commuxWinSignal(commuxWin_t win, int target) {
  return capi::onWindow(win, "commuxWinSignal",
                        [&](group::Window& w, auto timeout) { return w.signal(target, timeout); });
}

commuxResult_t commuxWinWaitSignal(commuxWin_t win, int source) {
  return capi::onWindow(win, "commuxWinWaitSignal", [&](group::Window& w, auto timeout) {
    return w.waitSignal(source, timeout);
  });
}

commuxResult_t commuxWinFlush(commuxWin_t win, int target) {
  return capi::onWindow(win, "commuxWinFlush",
                        [&](group::Window& w, auto timeout) { return w.flush(target, timeout); });
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
