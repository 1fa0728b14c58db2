// ProcessGroupUCX: torch's reconfigure API (dist._get_reconfigure_handle, dist._reconfigure,
// init_process_group(enable_reconfigure=True)). A group is given a new membership from the
// handles of the processes that take part (survivors of a failure, a replacement joining),
// and runs every later operation on it: a fresh core group under a store prefix of the
// reconfiguration's uuid, over the same store and the process's UCX worker (no new port).
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <variant>

#include "c10d/c10d_store.hpp"
#include "commux/process_group_ucx.hpp"
#include "config/process_engine.hpp"
#include "engine/engine.hpp"
#include "group/group.hpp"

namespace commux {

std::string ProcessGroupUCX::makeInstanceId() {
  // Tells this process's group apart from every other one that hands out handles: two
  // processes (or two groups of one) may have the same rank and uuid.
  std::random_device random;
  const std::uint64_t id = (std::uint64_t{random()} << 32) ^ random() ^
                           (static_cast<std::uint64_t>(::getpid()) << 16);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 0; i < 16; ++i) text[15 - i] = kHex[(id >> (4 * i)) & 0xf];
  return text;
}

#ifdef C10D_BACKEND_HAS_RECONFIGURE

namespace {

constexpr std::size_t kMaxHandleBytes = 128;

// A handle is "ucx:<rank>:<uuid>:<instance>": the rank and uuid the group had when it was
// asked (as gloo's handles say), and its instance id (16 hex digits). Handles come from
// other processes, out of band: nothing in one is used before it was checked.
void checkHandle(const std::string& handle) {
  const auto refuse = [&](const char* why) {
    TORCH_CHECK_VALUE(false, "commux: reconfigure: \"", handle.substr(0, kMaxHandleBytes),
                      "\" is not a commux reconfigure handle (", why,
                      "); pass what get_reconfigure_handle() returns on each member");
  };
  if (handle.size() > kMaxHandleBytes) refuse("too long");
  if (handle.rfind("ucx:", 0) != 0) refuse("it does not start with \"ucx:\"");
  std::vector<std::string> fields;
  std::size_t start = 4;
  for (std::size_t colon; (colon = handle.find(':', start)) != std::string::npos;
       start = colon + 1) {
    fields.push_back(handle.substr(start, colon - start));
  }
  fields.push_back(handle.substr(start));
  if (fields.size() != 3) refuse("it has not three fields after \"ucx:\"");
  const auto digits = [](const std::string& s, bool sign) {
    const std::size_t from = sign && !s.empty() && s[0] == '-' ? 1 : 0;
    return s.size() > from && s.size() <= 20 &&
           std::all_of(s.begin() + from, s.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  if (!digits(fields[0], false)) refuse("its rank is not a number");
  if (!digits(fields[1], true)) refuse("its uuid is not a number");
  if (fields[2].size() != 16 ||
      !std::all_of(fields[2].begin(), fields[2].end(),
                   [](unsigned char c) { return std::isxdigit(c) && !std::isupper(c); })) {
    refuse("its instance id is not 16 hex digits");
  }
}

// In the order that assigns ranks: as given for a list, sorted for a set (every member
// sorts alike).
std::vector<std::string> orderedHandles(const c10d::ReconfigureOptions& opts) {
  std::vector<std::string> handles;
  std::visit([&](const auto& given) { handles.assign(given.begin(), given.end()); },
             opts.handles);
  if (std::holds_alternative<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles)) {
    std::sort(handles.begin(), handles.end());
  }
  TORCH_CHECK_VALUE(!handles.empty(), "commux: reconfigure: no handles; pass one per member");
  for (const auto& h : handles) checkHandle(h);
  TORCH_CHECK_VALUE(std::set<std::string>(handles.begin(), handles.end()).size() == handles.size(),
                    "commux: reconfigure: a handle is given twice; pass one per member");
  return handles;
}

c10::intrusive_ptr<c10d::Work> completedWork() {
  auto future = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), std::vector<at::Device>{});
  future->markCompleted(c10::IValue(std::vector<at::Tensor>()));
  return c10d::Work::create_from_future(future);
}

std::vector<std::uint8_t> bytesOf(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

c10d::ReconfigureHandle ProcessGroupUCX::get_reconfigure_handle() const {
  return "ucx:" + std::to_string(rank_) + ":" + std::to_string(reconfigureUuid_) + ":" +
         instanceId_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::reconfigure(const c10d::ReconfigureOptions& opts) {
  checkSameProcess();
  const std::vector<std::string> handles = orderedHandles(opts);
  const std::string mine = get_reconfigure_handle();
  const auto me = std::find(handles.begin(), handles.end(), mine);
  TORCH_CHECK_VALUE(me != handles.end(), "commux: reconfigure: this member's handle (", mine,
                    ") is not among the ", handles.size(),
                    " given; each member passes the handle get_reconfigure_handle() returns "
                    "now (it changes with every reconfigure)");
  const int newRank = static_cast<int>(me - handles.begin());
  const int newSize = static_cast<int>(handles.size());
  const std::chrono::milliseconds timeout =
      opts.timeout && opts.timeout->count() > 0 ? *opts.timeout : timeout_;
  auto store = c10::make_intrusive<c10d::PrefixStore>(
      "commux/reconfigure/" + std::to_string(opts.uuid) + "/", store_);
  // The uuid names the new membership's keys: the first member claims it, and every member
  // checks the claim, so a reused uuid (stale records) fails alike everywhere instead of
  // joining the wrong peers.
  if (newRank == 0) store->compareSet("claimed", {}, bytesOf(mine));
  store->wait({"claimed"}, timeout);
  const auto claimed = store->get("claimed");
  TORCH_CHECK_VALUE(claimed == bytesOf(handles.front()), "commux: reconfigure: uuid ", opts.uuid,
                    " was used before by other members; pass a fresh uuid to every "
                    "reconfigure");

  // What is in flight on the old membership ends now, and its members hear that this one
  // left. No operation may be issued on this group while it is reconfigured.
  const bool background = group_->setsUpInBackground();
  group_->abort();
  auto fresh = std::make_unique<group::Group>(std::make_shared<C10dStore>(store), newRank,
                                              newSize,
                                              processEngine(static_cast<std::size_t>(newSize)),
                                              background);
  std::swap(group_, fresh);
  // The old group goes as the destructor lets one go: without the GIL.
  engine::Engine::runBlocking(
      [](void* old) { static_cast<std::unique_ptr<group::Group>*>(old)->reset(); }, &fresh);
  rank_ = newRank;
  size_ = newSize;
  try {
    group_->connectAll(timeout);
  } catch (...) {
    // Not every member came: the group refuses operations until a reconfigure succeeds.
    group_->holdUnconfigured();
    throw;
  }
  reconfigureUuid_ = opts.uuid;
  return completedWork();
}

#endif

}  // namespace commux
