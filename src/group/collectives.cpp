#include "group/collectives.hpp"

#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "collectives/round_fit.hpp"
#include "collectives/route.hpp"
#include "commux/options.hpp"
#include "core/error.hpp"
#include "core/group_health.hpp"
#include "cuda/device_ops.hpp"
#include "engine/engine.hpp"
#include "group/collective_check.hpp"
#include "group/device_memory.hpp"
#include "group/device_schedule_op.hpp"
#include "group/group.hpp"
#include "group/hierarchical.hpp"
#include "group/peer_table.hpp"
#include "shm/channel.hpp"
#include "shm/channel_op.hpp"
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

engine::ScheduleOp::Setup scheduleSetup(Group& group, collectives::Schedule schedule,
                                        std::optional<core::ReduceOp> reduce,
                                        std::uint32_t sequence,
                                        const engine::Description& description, int ranks) {
  // Before anything is posted: a step whose transfers the tag cannot tell apart (round_fit.hpp).
  const std::string clash = collectives::findRoundClash(schedule, Config::get().roundWrap);
  COMMUX_CHECK(clash.empty(), InvalidArgument, "commux: ", description.str(), " on ", ranks,
               " ranks: ", clash,
               ". Nothing was sent. Raise COMMUX_ROUND_WRAP if it was lowered; otherwise "
               "this is a commux bug, please report it");
  engine::ScheduleOp::Setup setup;
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
  COMMUX_CHECK(buffer.memory == core::MemoryType::Host || cuda::deviceOpsCompiled(), Unsupported,
               "commux: ", what, ": the ", role,
               " is in device memory, and this build of the core has no CUDA device support "
               "(build libcommux_core with a CUDA toolkit)");
  COMMUX_CHECK(
      buffer.dtype == core::Dtype::Opaque || buffer.elementSize == core::sizeOf(buffer.dtype),
      InvalidArgument, "commux: ", what, ": the ", role, " says its elements are ",
      core::nameOf(buffer.dtype), " of ", buffer.elementSize, " bytes; ",
      core::nameOf(buffer.dtype), " has ", core::sizeOf(buffer.dtype));
  COMMUX_CHECK(buffer.data != nullptr || buffer.count == 0, InvalidArgument, "commux: ", what,
               ": the ", role, " holds ", buffer.count, " elements at a null address");
}

/// The collectives that stage through host memory (gather, scatter, all-to-all) take no
/// device memory yet.
void checkHost(const char* what, const char* role, const core::Buffer& buffer) {
  COMMUX_CHECK(buffer.memory == core::MemoryType::Host, Unsupported, "commux: ", what, ": the ",
               role, " is in device memory; ", what,
               " takes host memory in this version (allreduce, reduce, broadcast, allgather, "
               "reduce_scatter and messages take device memory)");
}

/// The buffers of one call live in one kind of memory, on one GPU.
void checkSameMemory(const char* what, const core::Buffer& a, const core::Buffer& b) {
  if (!a.present() || !b.present() || (a.count == 0 && b.count == 0)) return;
  COMMUX_CHECK(a.memory == b.memory && a.device == b.device, InvalidArgument, "commux: ", what,
               ": its buffers are in different memories (", describeMemory(a), " and ",
               describeMemory(b), "); they must be in one");
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
      InvalidArgument, "commux: ", what, ": its buffers hold ", core::nameOf(a.dtype), " and ",
      core::nameOf(b.dtype), "; they must hold one type");
}

/// `n` elements per rank for `size` ranks, refused when that many bytes of `like`'s type
/// could not be counted (the checks below compare it with a buffer's size, and the
/// schedules of gather and scatter allocate it).
std::size_t blocksFor(const char* what, std::size_t n, std::size_t size, const core::Buffer& like) {
  const std::size_t element = like.elementSize == 0 ? 1 : like.elementSize;
  COMMUX_CHECK(n <= std::numeric_limits<std::size_t>::max() / size / element, InvalidArgument,
               "commux: ", what, ": ", n, " elements per rank for ", size,
               " ranks is more than memory can hold");
  return n * size;
}

/// `whole` (described as `wholeRole`) holds the group's `size` blocks of `part`'s elements,
/// of `part`'s type.
void checkBlocks(const char* what, const core::Buffer& whole, const char* wholeRole,
                 const core::Buffer& part, const char* partRole, std::size_t size) {
  checkSameType(what, part, whole);
  COMMUX_CHECK(whole.count == blocksFor(what, part.count, size, part), InvalidArgument,
               "commux: ", what, ": ", wholeRole, " holds ", whole.count,
               " elements; it must hold the group's size (", size, ") x ", partRole, "'s (",
               part.count, ")");
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

/// `device`: the buffers are in device memory, which never goes through shared memory.
Where where(Group& group, Collective collective, const char* what, std::size_t bytes,
            bool device = false) {
  Where w{};
  const auto route = group.route(collective, what, /*cpu=*/!device, bytes, w.channel);
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

/// COMMUX_CHECK_COLLECTIVES: every rank compares what it is about to call with the others'
/// before anything of the call is posted, on every path but one host's channel (which
/// checks the same at its first step). Before the path is taken: in a group that spans
/// hosts the path may depend on the size, and ranks whose calls differ must all be told.
/// `count`: the elements every rank must agree on (-1: none). `sendCounts`, `recvCounts`:
/// an all-to-all's counts per rank, checked pair by pair (null: none).
void checkCall(Group& group, const Where& w, Collective collective, const core::Buffer& shown,
               std::optional<core::ReduceOp> reduce, std::int64_t count,
               std::chrono::milliseconds timeout,
               const std::vector<std::size_t>* sendCounts = nullptr,
               const std::vector<std::size_t>* recvCounts = nullptr) {
  if (w.path == Path::SharedMemory || group.size() < 2 || !Config::get().checkCollectives ||
      group.batching()) {
    return;
  }
  CallSignature mine;
  mine.operation = static_cast<std::int64_t>(collective);
  mine.type = shown.present() ? static_cast<std::int64_t>(shown.dtype) : -1;
  mine.reduce = reduce ? static_cast<std::int64_t>(*reduce) : -1;
  mine.count = count;
  if (sendCounts != nullptr && recvCounts != nullptr) {
    mine.sendCounts = *sendCounts;
    mine.recvCounts = *recvCounts;
  }
  checkSameCall(
      group, mine, engine::Description(collectives::nameOf(collective)), timeout,
      [](const CallSignature& call) {
        return std::string(collectives::nameOf(static_cast<Collective>(call.operation))) + " of " +
               (call.count >= 0 ? std::to_string(call.count) + " x " : std::string()) +
               (call.type >= 0 ? core::nameOf(static_cast<core::Dtype>(call.type)) : "nothing") +
               (call.reduce >= 0
                    ? std::string(", ") + core::nameOf(static_cast<core::ReduceOp>(call.reduce))
                    : std::string());
      });
}

/// The caller's separate input (see collectives.hpp), into the buffer the call runs over.
void takeInput(const core::Buffer& input, const core::Buffer& buffer,
               const std::optional<core::Stream>& stream) {
  if (!input.present() || input.data == buffer.data || input.bytes() == 0) return;
  COMMUX_ASSERT(input.bytes() == buffer.bytes(), "commux: a collective's input and buffer differ in size");
  copyBytes(buffer.data, input.data, input.bytes(), buffer, stream);
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
    op = std::make_shared<shm::ChannelOp>(w.channel, std::move(job), nullptr, r->parts(),
                                          r->completer());
  }
  launchCollective(group, r, std::move(op));
  return r;
}

std::shared_ptr<Request> onSchedule(Group& group, collectives::Plan plan, core::Buffer work,
                                    std::optional<core::ReduceOp> reduce, const char* name,
                                    std::string detail, const core::Buffer& shown,
                                    std::chrono::milliseconds timeout,
                                    std::function<void()> finalize = nullptr,
                                    core::Buffer sendBuffer = {},
                                    const std::optional<core::Stream>& stream = std::nullopt) {
  const std::uint32_t sequence = group.nextSequence();
  auto description = describe(name, std::move(detail), shown, plan.algorithm, sequence);
  // Every member's record before the schedule's peers': all of them in one store request.
  group.watchMembers();
  auto setup =
      scheduleSetup(group, std::move(plan.schedule), reduce, sequence, description, group.size());
  setup.work = std::move(work);
  setup.sendBuffer = std::move(sendBuffer);
  if (finalize) setup.finalize = std::move(finalize);
  auto r = request(group, std::move(description), timeout);
  if (setup.work.memory == core::MemoryType::Cuda) {
    launchCollective(
        group, r,
        std::make_shared<DeviceScheduleOp>(std::move(setup), *stream, r->parts(), r->completer()),
        stream);
    return r;
  }
  launchCollective(
      group, r, std::make_shared<engine::ScheduleOp>(std::move(setup), r->parts(), r->completer()));
  return r;
}

}  // namespace

std::shared_ptr<Request> allreduce(Group& group, const core::Buffer& buffer, core::ReduceOp op,
                                   std::chrono::milliseconds timeout,
                                   const std::optional<core::Stream>& after,
                                   const core::Buffer& input) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("allreduce", "buffer", buffer);
  checkReduction("allreduce", buffer, op);
  const auto stream = streamFor(buffer, after);
  const Where w =
      where(group, Collective::Allreduce, "allreduce", buffer.bytes(), stream.has_value());
  checkCall(group, w, Collective::Allreduce, buffer, op, static_cast<std::int64_t>(buffer.count),
            timeout);
  takeInput(input, buffer, stream);
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Allreduce, 0, op);
    job.buffer = buffer;
    return shared(group, w, std::move(job), "allreduce", core::nameOf(op), buffer, timeout);
  }
  auto plan =
      collectives::planAllreduce(group.rank(), group.size(), buffer.count, buffer.elementSize,
                                 thresholds(stream.has_value(), w.schedule));
  return onSchedule(group, std::move(plan), buffer, op, "allreduce", core::nameOf(op), buffer,
                    timeout, nullptr, {}, stream);
}

std::shared_ptr<Request> reduce(Group& group, const core::Buffer& buffer, core::ReduceOp op,
                                int root, std::chrono::milliseconds timeout,
                                const std::optional<core::Stream>& after,
                                const core::Buffer& input) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("reduce", "buffer", buffer);
  checkReduction("reduce", buffer, op);
  checkRoot("reduce", group, root);
  const std::string detail = std::string(core::nameOf(op)) + " to rank " + std::to_string(root);
  const auto stream = streamFor(buffer, after);
  const Where w = where(group, Collective::Reduce, "reduce", buffer.bytes(), stream.has_value());
  checkCall(group, w, Collective::Reduce, buffer, op, static_cast<std::int64_t>(buffer.count),
            timeout);
  takeInput(input, buffer, stream);
  if (w.path != Path::Schedule) {
    // A non-root's buffer is only read on one host's channel; in parts, a host's leader
    // folds its host's buffers into its own, so a non-root's must be a copy.
    shm::Job job = jobOf(shm::Kind::Reduce, root, op);
    job.buffer =
        w.path == Path::Hierarchical && group.rank() != root ? core::hostCopyOf(buffer) : buffer;
    return shared(group, w, std::move(job), "reduce", detail, buffer, timeout);
  }
  auto plan =
      collectives::planReduce(group.rank(), group.size(), root, buffer.count, buffer.elementSize,
                              thresholds(stream.has_value(), w.schedule));
  // A schedule folds into its work buffer on every rank on the way: a non-root's must be
  // its own.
  core::Buffer work = group.rank() == root ? buffer : copyOf(buffer, stream);
  return onSchedule(group, std::move(plan), std::move(work), op, "reduce", detail, buffer, timeout,
                    nullptr, {}, stream);
}

std::shared_ptr<Request> broadcast(Group& group, const core::Buffer& buffer, int root,
                                   std::chrono::milliseconds timeout,
                                   const std::optional<core::Stream>& after,
                                   const core::Buffer& input) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("broadcast", "buffer", buffer);
  checkRoot("broadcast", group, root);
  const std::string detail = "from rank " + std::to_string(root);
  const auto stream = streamFor(buffer, after);
  const Where w =
      where(group, Collective::Broadcast, "broadcast", buffer.bytes(), stream.has_value());
  checkCall(group, w, Collective::Broadcast, buffer, std::nullopt,
            static_cast<std::int64_t>(buffer.count), timeout);
  takeInput(input, buffer, stream);
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Broadcast, root);
    job.buffer = buffer;
    return shared(group, w, std::move(job), "broadcast", detail, buffer, timeout);
  }
  auto plan =
      collectives::planBroadcast(group.rank(), group.size(), root, buffer.count, buffer.elementSize,
                                 thresholds(stream.has_value(), w.schedule));
  return onSchedule(group, std::move(plan), buffer, std::nullopt, "broadcast", detail, buffer,
                    timeout, nullptr, {}, stream);
}

std::shared_ptr<Request> allgather(Group& group, const core::Buffer& input,
                                   const core::Buffer& output, std::chrono::milliseconds timeout,
                                   const std::optional<core::Stream>& after) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("allgather", "input buffer", input);
  checkBuffer("allgather", "output buffer", output);
  checkSameMemory("allgather", input, output);
  const std::size_t n = input.count;
  const auto size = static_cast<std::size_t>(group.size());
  checkBlocks("allgather", output, "the output", input, "the input", size);
  const core::Buffer own = core::slice(output, n * static_cast<std::size_t>(group.rank()), n);
  COMMUX_CHECK(!overlap(input, output) || input.data == own.data, InvalidArgument,
               "commux: allgather: the input overlaps the output other than as this rank's own "
               "block of it (elements ",
               n * static_cast<std::size_t>(group.rank()), " to ",
               n * static_cast<std::size_t>(group.rank() + 1), ")");
  const auto stream = streamFor(output, after);
  const Where w =
      where(group, Collective::Allgather, "allgather", output.bytes(), stream.has_value());
  checkCall(group, w, Collective::Allgather, input, std::nullopt, static_cast<std::int64_t>(n),
            timeout);
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Allgather);
    job.input = input;
    job.output = output;
    return shared(group, w, std::move(job), "allgather", "", input, timeout);
  }
  // Planned before the output is written: a forced schedule may be refused.
  auto plan = collectives::planAllgather(
      group.rank(), group.size(), collectives::equalBlocks(n, group.size()), output.elementSize,
      thresholds(stream.has_value(), w.schedule));
  if (input.data != own.data && n != 0)
    copyBytes(own.data, input.data, input.bytes(), input, stream);
  return onSchedule(group, std::move(plan), output, std::nullopt, "allgather", "", input, timeout,
                    nullptr, {}, stream);
}

std::shared_ptr<Request> reduceScatter(Group& group, const core::Buffer& input,
                                       const core::Buffer& output, core::ReduceOp op,
                                       std::chrono::milliseconds timeout,
                                       const std::optional<core::Stream>& after) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("reduce_scatter", "input buffer", input);
  checkBuffer("reduce_scatter", "output buffer", output);
  checkSameMemory("reduce_scatter", input, output);
  checkReduction("reduce_scatter", input, op);
  const std::size_t n = output.count;
  const auto size = static_cast<std::size_t>(group.size());
  checkBlocks("reduce_scatter", input, "the input", output, "the output", size);
  COMMUX_CHECK(!overlap(input, output), InvalidArgument,
               "commux: reduce_scatter: the output overlaps the input, which must keep its "
               "values");
  const auto stream = streamFor(input, after);
  const Where w =
      where(group, Collective::ReduceScatter, "reduce_scatter", input.bytes(), stream.has_value());
  checkCall(group, w, Collective::ReduceScatter, output, op, static_cast<std::int64_t>(n), timeout);
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::ReduceScatter, 0, op);
    job.input = input;
    job.output = output;
    return shared(group, w, std::move(job), "reduce_scatter", core::nameOf(op), output, timeout);
  }
  auto plan = collectives::planReduceScatter(
      group.rank(), group.size(), collectives::equalBlocks(n, group.size()), input.elementSize,
      thresholds(stream.has_value(), w.schedule));
  // The schedule folds into its work buffer: the input must stay as it is.
  core::Buffer work = copyOf(input, stream);
  const core::Buffer mine = core::slice(work, n * static_cast<std::size_t>(group.rank()), n);
  return onSchedule(
      group, std::move(plan), work, op, "reduce_scatter", core::nameOf(op), output, timeout,
      [mine, output, stream] { copyBytes(output.data, mine.data, output.bytes(), output, stream); },
      {}, stream);
}

std::shared_ptr<Request> barrier(Group& group, std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  const Where w = where(group, Collective::Barrier, "barrier", 0);
  checkCall(group, w, Collective::Barrier, core::Buffer{}, std::nullopt, -1, timeout);
  if (w.path != Path::Schedule) {
    return shared(group, w, shm::Job{}, "barrier", "", core::Buffer{}, timeout);
  }
  // A schedule of empty messages over an empty (but present) work buffer.
  static char none;
  return onSchedule(group, collectives::planBarrier(group.rank(), group.size()),
                    core::bufferOf(&none, 0, core::Dtype::UInt8), std::nullopt, "barrier", "",
                    core::Buffer{}, timeout);
}

std::shared_ptr<Request> gather(Group& group, const core::Buffer& input, const core::Buffer& output,
                                int root, std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("gather", "input buffer", input);
  checkHost("gather", "input buffer", input);
  checkRoot("gather", group, root);
  const bool isRoot = group.rank() == root;
  const std::size_t n = input.count;
  const auto size = static_cast<std::size_t>(group.size());
  if (isRoot) {
    checkBuffer("gather", "output buffer", output);
    checkHost("gather", "output buffer", output);
    checkBlocks("gather", output, "the root's output", input, "the input", size);
    COMMUX_CHECK(!overlap(input, output), InvalidArgument,
                 "commux: gather: the root's output overlaps its input");
  }
  const std::string detail = "to rank " + std::to_string(root);
  const Where w = where(group, Collective::Gather, "gather", input.bytes());
  checkCall(group, w, Collective::Gather, input, std::nullopt, static_cast<std::int64_t>(n),
            timeout);
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Gather, root);
    job.input = input;
    if (isRoot) job.output = output;  // blocks in rank order
    return shared(group, w, std::move(job), "gather", detail, input, timeout);
  }
  // The tree's buffer holds the blocks in the order of ranks relative to the root.
  const std::size_t vr =
      (static_cast<std::size_t>(group.rank()) + size - static_cast<std::size_t>(root)) % size;
  core::Buffer work = core::hostBufferLike(input, blocksFor("gather", n, size, input));
  if (input.bytes() != 0) std::memcpy(core::slice(work, n * vr, n).data, input.data, input.bytes());
  std::function<void()> finalize;
  if (isRoot) {
    finalize = [work, output, n, size, root] {
      for (std::size_t v = 0; v < size && n != 0; ++v) {
        const std::size_t r = (v + static_cast<std::size_t>(root)) % size;
        std::memcpy(core::slice(output, n * r, n).data, core::slice(work, n * v, n).data,
                    n * work.elementSize);
      }
    };
  }
  return onSchedule(
      group,
      collectives::Plan{collectives::gatherBinomial(group.rank(), group.size(), root, n),
                        "binomial"},
      std::move(work), std::nullopt, "gather", detail, input, timeout, std::move(finalize));
}

std::shared_ptr<Request> scatter(Group& group, const core::Buffer& input,
                                 const core::Buffer& output, int root,
                                 std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("scatter", "output buffer", output);
  checkHost("scatter", "output buffer", output);
  checkRoot("scatter", group, root);
  const bool isRoot = group.rank() == root;
  const std::size_t n = output.count;
  const auto size = static_cast<std::size_t>(group.size());
  if (isRoot) {
    checkBuffer("scatter", "input buffer", input);
    checkHost("scatter", "input buffer", input);
    checkBlocks("scatter", input, "the root's input", output, "the output", size);
    COMMUX_CHECK(!overlap(input, output), InvalidArgument,
                 "commux: scatter: the root's output overlaps its input");
  }
  const std::string detail = "from rank " + std::to_string(root);
  const Where w = where(group, Collective::Scatter, "scatter", output.bytes());
  checkCall(group, w, Collective::Scatter, output, std::nullopt, static_cast<std::int64_t>(n),
            timeout);
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Scatter, root);
    if (isRoot) job.input = input;  // blocks in rank order
    job.output = output;
    return shared(group, w, std::move(job), "scatter", detail, output, timeout);
  }
  // The tree's buffer holds the blocks in the order of ranks relative to the root.
  core::Buffer work = core::hostBufferLike(output, blocksFor("scatter", n, size, output));
  for (std::size_t v = 0; isRoot && v < size && n != 0; ++v) {
    const std::size_t r = (v + static_cast<std::size_t>(root)) % size;
    std::memcpy(core::slice(work, n * v, n).data, core::slice(input, n * r, n).data,
                n * work.elementSize);
  }
  const std::size_t vr =
      (static_cast<std::size_t>(group.rank()) + size - static_cast<std::size_t>(root)) % size;
  const core::Buffer mine = core::slice(work, n * vr, n);
  return onSchedule(
      group,
      collectives::Plan{collectives::scatterBinomial(group.rank(), group.size(), root, n),
                        "binomial"},
      std::move(work), std::nullopt, "scatter", detail, output, timeout, [mine, output] {
        if (output.bytes() != 0) std::memcpy(output.data, mine.data, output.bytes());
      });
}

std::shared_ptr<Request> alltoall(Group& group, const core::Buffer& input,
                                  const core::Buffer& output, std::vector<std::size_t> sendCounts,
                                  std::vector<std::size_t> recvCounts,
                                  std::chrono::milliseconds timeout) {
  group.checkUsable();
  group.joinSetUp();
  checkBuffer("alltoall", "input buffer", input);
  checkBuffer("alltoall", "output buffer", output);
  checkHost("alltoall", "input buffer", input);
  checkHost("alltoall", "output buffer", output);
  checkSameType("alltoall", input, output);
  const int rank = group.rank();
  const auto size = static_cast<std::size_t>(group.size());
  // Without counts, every rank's blocks are of one size, the same on every rank: all plan
  // alike. Counts that happen to be equal on this rank say nothing of the others'.
  const bool uniform = sendCounts.empty() && recvCounts.empty();
  const auto countsFor = [&](const char* role, std::vector<std::size_t>& counts,
                             const core::Buffer& buffer) {
    if (counts.empty()) {
      COMMUX_CHECK(buffer.count % size == 0, InvalidArgument, "commux: alltoall: the ", role,
                   " holds ", buffer.count, " elements, which the group's size (", size,
                   ") does not divide; pass the counts per rank");
      counts.assign(size, buffer.count / size);
      return;
    }
    COMMUX_CHECK(counts.size() == size, InvalidArgument, "commux: alltoall: ", counts.size(), " ",
                 role, " counts for a group of ", size);
    std::size_t total = 0;
    for (const std::size_t c : counts) {
      // Each within the buffer, so the sum cannot wrap past it unnoticed.
      COMMUX_CHECK(c <= buffer.count && total <= buffer.count - c, InvalidArgument,
                   "commux: alltoall: the ", role, " counts add up to more than the ", role, "'s ",
                   buffer.count, " elements");
      total += c;
    }
    COMMUX_CHECK(total == buffer.count, InvalidArgument, "commux: alltoall: the ", role,
                 " counts add up to ", total, " elements; the ", role, " holds ", buffer.count);
  };
  countsFor("input", sendCounts, input);
  countsFor("output", recvCounts, output);
  const auto self = static_cast<std::size_t>(rank);
  // Under the call check the pair (rank, rank) is checked with the others, on every rank
  // alike: refused here, this rank alone would leave the others waiting in the check.
  COMMUX_CHECK(Config::get().checkCollectives || sendCounts[self] == recvCounts[self],
               InvalidArgument,
               "commux: alltoall: this rank (", rank, ") sends ", sendCounts[self],
               " elements to itself but its output has room for ", recvCounts[self],
               " from itself");
  COMMUX_CHECK(!overlap(input, output), InvalidArgument,
               "commux: alltoall: the output overlaps the input");
  const Where w = where(group, Collective::Alltoall, "alltoall", input.bytes());
  // Uneven blocks differ between ranks; equal ones (no counts) must agree, and a rank
  // that passes counts must not meet one that passes none (they would plan apart). Counts
  // are checked pair by pair: a block that does not fit its receiver's room would fail that
  // rank alone, and leave the others waiting for it until their timeout.
  checkCall(group, w, Collective::Alltoall, input, std::nullopt,
            uniform ? static_cast<std::int64_t>(input.count) : -1, timeout,
            uniform ? nullptr : &sendCounts, uniform ? nullptr : &recvCounts);
  if (w.path != Path::Schedule) {
    shm::Job job = jobOf(shm::Kind::Alltoall);
    job.input = input;
    job.output = output;
    job.sendCounts = std::move(sendCounts);
    job.recvCounts = std::move(recvCounts);
    return shared(group, w, std::move(job), "alltoall", "", input, timeout);
  }
  const auto blocksOf = [](const std::vector<std::size_t>& counts) {
    std::vector<collectives::Range> blocks;
    std::size_t offset = 0;
    for (const std::size_t c : counts) {
      blocks.push_back({offset, c});
      offset += c;
    }
    return blocks;
  };
  const auto sendBlocks = blocksOf(sendCounts);
  const auto recvBlocks = blocksOf(recvCounts);
  auto plan =
      collectives::planAlltoall(rank, group.size(), sendBlocks, recvBlocks, input.elementSize,
                                /*cpu=*/true, uniform, thresholds(false, w.schedule));
  // Sends read the caller's input and receives land in its output, unless Bruck's pack
  // areas need room past the received blocks: then in a buffer that has it, copied out.
  core::Buffer work = output;
  std::function<void()> finalize;
  if (plan.schedule.workElements > output.count) {
    work = core::hostBufferLike(output, plan.schedule.workElements);
    finalize = [received = core::slice(work, 0, output.count), output] {
      if (output.bytes() != 0) std::memcpy(output.data, received.data, output.bytes());
    };
  }
  if (sendCounts[self] != 0) {
    std::memcpy(core::slice(work, recvBlocks[self].offset, recvCounts[self]).data,
                core::slice(input, sendBlocks[self].offset, sendCounts[self]).data,
                sendCounts[self] * input.elementSize);
  }
  return onSchedule(group, std::move(plan), std::move(work), std::nullopt, "alltoall", "", input,
                    timeout, std::move(finalize), input);
}

}  // namespace commux::group
