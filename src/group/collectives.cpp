#include "group/collectives.hpp"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "collectives/round_fit.hpp"
#include "collectives/route.hpp"
#include "commux/options.hpp"
#include "core/error.hpp"
#include "core/group_health.hpp"
#include "engine/engine.hpp"
#include "group/collective_check.hpp"
#include "group/group.hpp"
#include "group/hierarchical.hpp"
#include "group/peer_table.hpp"
#include "shm/channel.hpp"
#include "shm/collective_op.hpp"
#include "shm/job.hpp"

namespace commux::group {

collectives::Thresholds thresholds(bool deviceMemory, const char* forced) {
  const Config& c = Config::get();
  collectives::Thresholds t;
  t.allreduceRingMinBytes = c.allreduceRingMinBytes;
  t.chainMinBytes = c.chainMinBytes;
  t.pipelineChunkBytes = deviceMemory ? c.cudaChunkBytes : c.pipelineChunkBytes;
  t.logAlgorithmsMinRanks = c.logAlgorithmsMinRanks;
  t.ringMinBlockBytes = c.ringMinBlockBytes;
  t.forced = forced;
  return t;
}

engine::CollectiveOp::Setup scheduleSetup(Group& group, collectives::Schedule schedule,
                                          std::optional<core::ReduceOp> reduce,
                                          std::uint32_t sequence,
                                          const engine::Description& description, int ranks) {
  // Before anything is posted: a step whose transfers the tag cannot tell apart (round_fit.hpp).
  const std::string clash = collectives::findRoundClash(schedule, Config::get().roundWrap);
  COMMUX_CHECK(clash.empty(), InvalidArgument, "commux: ", description.str(), " on ", ranks,
               " ranks: ", clash,
               ". Nothing was sent. Raise COMMUX_ROUND_WRAP if it was lowered; otherwise "
               "this is a commux bug, please report it");
  engine::CollectiveOp::Setup setup;
  setup.routes = group.peers().get(schedule.peers());
  setup.schedule = std::move(schedule);
  setup.reduce = reduce;
  setup.myContext = group.context();
  setup.myRank = group.rank();
  // The tag keeps the sequence modulo the wrap (COMMUX_SEQUENCE_WRAP, 2^20 by default).
  setup.sequence = sequence & (Config::get().sequenceWrap - 1);
  setup.roundWrap = Config::get().roundWrap;
  return setup;
}

void launchCollective(Group& group, const std::shared_ptr<Request>& request,
                      std::shared_ptr<engine::Op> op, const std::optional<core::Stream>& stream) {
  group.watchMembers();
  request->reportFailureTo(group.health());
  group.launch(request, std::move(op), stream);
}

namespace {

using collectives::Collective;
using collectives::Path;

// --- Arguments, checked before anything moves ------------------------------------------

void checkBuffer(const char* what, const char* role, const core::Buffer& buffer) {
  COMMUX_CHECK(buffer.present(), InvalidArgument, "commux: ", what, ": the ", role,
               " is missing (its element size is 0)");
  COMMUX_CHECK(buffer.memory == core::MemoryType::Host, InvalidArgument, "commux: ", what, ": the ",
               role,
               " is in device memory; the core's collectives take host memory (device "
               "buffers go through the torch adapter for now)");
  COMMUX_CHECK(
      buffer.dtype == core::Dtype::Opaque || buffer.elementSize == core::sizeOf(buffer.dtype),
      InvalidArgument, "commux: ", what, ": the ", role, " says its elements are ",
      core::nameOf(buffer.dtype), " of ", buffer.elementSize, " bytes; ",
      core::nameOf(buffer.dtype), " has ", core::sizeOf(buffer.dtype));
  COMMUX_CHECK(buffer.data != nullptr || buffer.count == 0, InvalidArgument, "commux: ", what,
               ": the ", role, " holds ", buffer.count, " elements at a null address");
}

void checkReduction(const char* what, const core::Buffer& buffer, core::ReduceOp op) {
  COMMUX_CHECK(core::reduces(buffer.dtype, op), InvalidArgument, "commux: ", what, ": ",
               core::nameOf(op), " is not defined on ", core::nameOf(buffer.dtype),
               " (the bitwise reductions take integers and bool; complex numbers only sum and "
               "product; an opaque type none)");
}

void checkRoot(const char* what, const Group& group, int root) {
  COMMUX_CHECK(root >= 0 && root < group.size(), InvalidArgument, "commux: ", what, ": root ", root,
               " is not a rank of this group of ", group.size());
}

void checkSameType(const char* what, const core::Buffer& a, const core::Buffer& b) {
  COMMUX_CHECK(
      a.dtype == b.dtype && a.elementSize == b.elementSize && a.frontEndType == b.frontEndType,
      InvalidArgument, "commux: ", what, ": the input holds ", core::nameOf(a.dtype),
      ", the output ", core::nameOf(b.dtype), "; they must hold one type");
}

bool overlap(const core::Buffer& a, const core::Buffer& b) {
  if (a.bytes() == 0 || b.bytes() == 0) return false;
  return a.bytePointer() < b.bytePointer() + b.bytes() &&
         b.bytePointer() < a.bytePointer() + a.bytes();
}

// --- Where it runs, and its launch ------------------------------------------------------

struct Where {
  Path path;
  const char* schedule;  // Path::Schedule: the schedule forced, or null
  std::shared_ptr<shm::Channel> channel;
};

Where where(Group& group, Collective collective, const char* what, std::size_t bytes) {
  Where w{};
  const auto route = group.route(collective, what, /*cpu=*/true, bytes, w.channel);
  w.path = route.path;
  w.schedule = route.schedule;
  return w;
}

std::shared_ptr<Request> request(Group& group, engine::Description description,
                                 std::chrono::milliseconds timeout) {
  return std::make_shared<Request>(Request::Kind::Other, std::move(description), timeout,
                                   group.sharedEngine());
}

engine::Description describe(const char* name, std::string detail, const core::Buffer& shown,
                             const char* algorithm, std::uint32_t sequence) {
  return engine::Description::collective(name, std::move(detail), shown.present() ? 1 : 0,
                                         static_cast<std::int64_t>(shown.count),
                                         core::nameOf(shown.dtype), algorithm, sequence);
}

shm::Job jobOf(shm::Kind kind, int root = 0, core::ReduceOp reduce = core::ReduceOp::Sum) {
  shm::Job job;
  job.kind = kind;
  job.root = root;
  job.reduce = reduce;
  return job;
}

/// `job` on the host's channel (one host) or in parts across hosts.
std::shared_ptr<Request> shared(Group& group, const Where& w, shm::Job job, const char* name,
                                std::string detail, const core::Buffer& shown,
                                std::chrono::milliseconds timeout) {
  const bool parts = w.path == Path::Hierarchical;
  const std::uint32_t sequence = group.nextSequence();
  auto r = request(
      group,
      describe(name, std::move(detail), shown, parts ? "hierarchical" : "shared memory", sequence),
      timeout);
  std::shared_ptr<engine::Op> op;
  if (parts) {
    op = makeHierarchical(group, std::move(job), nullptr, r->parts(), sequence, r->completer());
  } else {
    op = std::make_shared<shm::CollectiveOp>(w.channel, std::move(job), nullptr, r->parts(),
                                             r->completer());
  }
  launchCollective(group, r, std::move(op));
  return r;
}

std::shared_ptr<Request> onSchedule(Group& group, Collective collective, collectives::Plan plan,
                                    core::Buffer work, std::optional<core::ReduceOp> reduce,
                                    const char* name, std::string detail, const core::Buffer& shown,
                                    std::chrono::milliseconds timeout,
                                    std::function<void()> finalize = nullptr) {
  const std::uint32_t sequence = group.nextSequence();
  auto description = describe(name, std::move(detail), shown, plan.algorithm, sequence);
  if (group.size() > 1 && Config::get().checkCollectives && !group.batching()) {
    CallSignature mine;
    mine.operation = static_cast<std::int64_t>(collective);
    mine.type = shown.present() ? static_cast<std::int64_t>(shown.dtype) : -1;
    mine.reduce = reduce ? static_cast<std::int64_t>(*reduce) : -1;
    mine.count = shown.present() ? static_cast<std::int64_t>(shown.count) : -1;
    checkSameCall(group, mine, description, timeout, [](const CallSignature& call) {
      return std::string(collectives::nameOf(static_cast<Collective>(call.operation))) + " of " +
             (call.count >= 0 ? std::to_string(call.count) + " x " : std::string()) +
             (call.type >= 0 ? core::nameOf(static_cast<core::Dtype>(call.type)) : "nothing") +
             (call.reduce >= 0
                  ? std::string(", ") + core::nameOf(static_cast<core::ReduceOp>(call.reduce))
                  : std::string());
    });
  }
  auto setup =
      scheduleSetup(group, std::move(plan.schedule), reduce, sequence, description, group.size());
  setup.work = std::move(work);
  if (finalize) setup.finalize = std::move(finalize);
  auto r = request(group, std::move(description), timeout);
  launchCollective(
      group, r,
      std::make_shared<engine::CollectiveOp>(std::move(setup), r->parts(), r->completer()));
  return r;
}

}  // namespace

std::shared_ptr<Request> allreduce(Group& group, const core::Buffer& buffer, core::ReduceOp op,
                                   std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("allreduce", "buffer", buffer);
  checkReduction("allreduce", buffer, op);
  const Where w = where(group, Collective::Allreduce, "allreduce", buffer.bytes());
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Allreduce, 0, op);
    job.buffer = buffer;
    return shared(group, w, std::move(job), "allreduce", core::nameOf(op), buffer, timeout);
  }
  auto plan = collectives::planAllreduce(group.rank(), group.size(), buffer.count,
                                         buffer.elementSize, thresholds(false, w.schedule));
  return onSchedule(group, Collective::Allreduce, std::move(plan), buffer, op, "allreduce",
                    core::nameOf(op), buffer, timeout);
}

std::shared_ptr<Request> reduce(Group& group, const core::Buffer& buffer, core::ReduceOp op,
                                int root, std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("reduce", "buffer", buffer);
  checkReduction("reduce", buffer, op);
  checkRoot("reduce", group, root);
  const std::string detail = std::string(core::nameOf(op)) + " to rank " + std::to_string(root);
  const Where w = where(group, Collective::Reduce, "reduce", buffer.bytes());
  if (w.path != Path::Schedule) {
    // A non-root's buffer is only read on one host's channel; in parts, a host's leader
    // folds its host's buffers into its own, so a non-root's must be a copy.
    shm::Job job = jobOf(shm::Kind::Reduce, root, op);
    job.buffer =
        w.path == Path::Hierarchical && group.rank() != root ? core::hostCopyOf(buffer) : buffer;
    return shared(group, w, std::move(job), "reduce", detail, buffer, timeout);
  }
  auto plan = collectives::planReduce(group.rank(), group.size(), root, buffer.count,
                                      buffer.elementSize, thresholds(false, w.schedule));
  // A schedule folds into its work buffer on every rank on the way: a non-root's must be
  // its own.
  core::Buffer work = group.rank() == root ? buffer : core::hostCopyOf(buffer);
  return onSchedule(group, Collective::Reduce, std::move(plan), std::move(work), op, "reduce",
                    detail, buffer, timeout);
}

std::shared_ptr<Request> broadcast(Group& group, const core::Buffer& buffer, int root,
                                   std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("broadcast", "buffer", buffer);
  checkRoot("broadcast", group, root);
  const std::string detail = "from rank " + std::to_string(root);
  const Where w = where(group, Collective::Broadcast, "broadcast", buffer.bytes());
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Broadcast, root);
    job.buffer = buffer;
    return shared(group, w, std::move(job), "broadcast", detail, buffer, timeout);
  }
  auto plan = collectives::planBroadcast(group.rank(), group.size(), root, buffer.count,
                                         buffer.elementSize, thresholds(false, w.schedule));
  return onSchedule(group, Collective::Broadcast, std::move(plan), buffer, std::nullopt,
                    "broadcast", detail, buffer, timeout);
}

std::shared_ptr<Request> allgather(Group& group, const core::Buffer& input,
                                   const core::Buffer& output, std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("allgather", "input buffer", input);
  checkBuffer("allgather", "output buffer", output);
  checkSameType("allgather", input, output);
  const std::size_t n = input.count;
  const auto size = static_cast<std::size_t>(group.size());
  COMMUX_CHECK(output.count == n * size, InvalidArgument, "commux: allgather: the output holds ",
               output.count, " elements; it must hold the group's size (", size,
               ") x the input's (", n, ")");
  const core::Buffer own = core::slice(output, n * static_cast<std::size_t>(group.rank()), n);
  COMMUX_CHECK(!overlap(input, output) || input.data == own.data, InvalidArgument,
               "commux: allgather: the input overlaps the output other than as this rank's own "
               "block of it (elements ",
               n * static_cast<std::size_t>(group.rank()), " to ",
               n * static_cast<std::size_t>(group.rank() + 1), ")");
  const Where w = where(group, Collective::Allgather, "allgather", output.bytes());
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Allgather);
    job.input = input;
    job.output = output;
    return shared(group, w, std::move(job), "allgather", "", input, timeout);
  }
  // Planned before the output is written: a forced schedule may be refused.
  auto plan = collectives::planAllgather(group.rank(), group.size(),
                                         collectives::equalBlocks(n, group.size()),
                                         output.elementSize, thresholds(false, w.schedule));
  if (input.data != own.data && n != 0) std::memcpy(own.data, input.data, input.bytes());
  return onSchedule(group, Collective::Allgather, std::move(plan), output, std::nullopt,
                    "allgather", "", input, timeout);
}

std::shared_ptr<Request> reduceScatter(Group& group, const core::Buffer& input,
                                       const core::Buffer& output, core::ReduceOp op,
                                       std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("reduce_scatter", "input buffer", input);
  checkBuffer("reduce_scatter", "output buffer", output);
  checkSameType("reduce_scatter", input, output);
  checkReduction("reduce_scatter", input, op);
  const std::size_t n = output.count;
  const auto size = static_cast<std::size_t>(group.size());
  COMMUX_CHECK(input.count == n * size, InvalidArgument, "commux: reduce_scatter: the input holds ",
               input.count, " elements; it must hold the group's size (", size,
               ") x the output's (", n, ")");
  COMMUX_CHECK(!overlap(input, output), InvalidArgument,
               "commux: reduce_scatter: the output overlaps the input, which must keep its "
               "values");
  const Where w = where(group, Collective::ReduceScatter, "reduce_scatter", input.bytes());
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::ReduceScatter, 0, op);
    job.input = input;
    job.output = output;
    return shared(group, w, std::move(job), "reduce_scatter", core::nameOf(op), output, timeout);
  }
  auto plan = collectives::planReduceScatter(group.rank(), group.size(),
                                             collectives::equalBlocks(n, group.size()),
                                             input.elementSize, thresholds(false, w.schedule));
  // The schedule folds into its work buffer: the input must stay as it is.
  core::Buffer work = core::hostCopyOf(input);
  const core::Buffer mine = core::slice(work, n * static_cast<std::size_t>(group.rank()), n);
  return onSchedule(group, Collective::ReduceScatter, std::move(plan), work, op, "reduce_scatter",
                    core::nameOf(op), output, timeout, [mine, output] {
                      if (output.bytes() != 0) std::memcpy(output.data, mine.data, output.bytes());
                    });
}

std::shared_ptr<Request> barrier(Group& group, std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  const Where w = where(group, Collective::Barrier, "barrier", 0);
  if (w.path != Path::Schedule) {
    return shared(group, w, shm::Job{}, "barrier", "", core::Buffer{}, timeout);
  }
  // A schedule of empty messages over an empty (but present) work buffer.
  static char none;
  return onSchedule(group, Collective::Barrier,
                    collectives::planBarrier(group.rank(), group.size()),
                    core::bufferOf(&none, 0, core::Dtype::UInt8), std::nullopt, "barrier", "",
                    core::Buffer{}, timeout);
}

}  // namespace commux::group
