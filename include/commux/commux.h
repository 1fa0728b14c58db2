/* commux's C API: communicators over UCX for programs without torch (C, C++, Fortran
 * through ISO_C_BINDING, Rust through FFI). Shaped like NCCL's calls (a unique id, one
 * communicator per rank, (sendbuf, recvbuf, count, datatype, op, comm, stream)), with what
 * NCCL lacks: tagged messages matched by (sender, tag) as MPI matches them, receives from
 * any source, host memory, and failures named by rank.
 *
 * Conventions for every call
 * --------------------------
 * - Returns commuxSuccess or an error code; commuxGetLastError() then says what went wrong
 *   in words (the rank, the sizes, the peer that died). Arguments are checked before a
 *   byte moves: a call refused with commuxInvalidArgument changed nothing, and the
 *   communicator stays usable.
 * - Memory and streams: with `stream` NULL every buffer is host memory. With a stream (a
 *   cudaStream_t: cudaStreamLegacy for the default stream) every buffer of the call is CUDA
 *   device (or managed) memory on one GPU: the operation starts once the stream has run the
 *   work queued on it before the call, its own copies go on that stream, and the call
 *   returns once its result is in place in that stream's order (work queued on the stream
 *   afterwards sees it; other streams must wait for this one). Device memory never goes
 *   through the host's shared memory; the folds run on the GPU, in commux's own kernels,
 *   with the same results as the host's. Messages, allreduce, reduce, broadcast,
 *   allgather and reduce-scatter take device memory; all-to-all, gather and scatter, the
 *   windows and commuxCommRegister take host memory only (commuxUnsupported). A build
 *   of libcommux_core without CUDA refuses a stream with commuxUnsupported; a device
 *   pointer passed with a NULL stream, or a host pointer with one, is refused with
 *   commuxInvalidArgument.
 * - Blocking: the calls without an I prefix return once this rank's part is done (its
 *   buffers may be reused and hold their results). Their wait sleeps instead of spinning
 *   after a short while. Between commuxGroupStart and commuxGroupEnd they only post their
 *   operation; commuxGroupEnd waits for all of them.
 * - Timeouts: every operation fails with commuxTimeout after the communicator's timeout
 *   (commuxCommSetTimeout; 30 minutes by default, as torch's); what it
 *   left in flight is cancelled first, and the call returns only once the operation has
 *   ended: a receive UCX already matched (a rendezvous under way) cannot be stopped, so it
 *   is let finish, and nothing lands in the buffer after the call returned. (Should such a
 *   transfer still run 10 s after the cancel, the error says that the buffer may yet
 *   change.) A timeout of 0 means none. Known limit: a send
 *   large enough to go by rendezvous (UCX's threshold, tens of KiB) whose announcement
 *   already reached the receiver cannot be recalled: a matching receive posted later still
 *   reads the sender's buffer. After such a send timed out or was freed unfinished, keep
 *   its buffer allocated and unchanged until the receiver has received the message or left
 *   the communicator (or exchange only messages the receiver is known to expect).
 * - Failures: a peer's death fails the operations that need it with commuxRemoteError and
 *   names the rank; after a failed collective, later collectives on the communicator are
 *   refused (ranks may be out of step) while point-to-point calls to live ranks still work.
 * - Threads: every call is thread safe. Collectives on one communicator must be issued in
 *   the same order on every rank, so issue them from one thread at a time per
 *   communicator. Point-to-point calls may come from any threads; messages between a pair
 *   of ranks with the same tag are matched in the order they were posted.
 */
#ifndef COMMUX_COMMUX_H
#define COMMUX_COMMUX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COMMUX_VERSION_CODE 100 /* 0.1.0: major * 10000 + minor * 100 + patch */

typedef enum {
  commuxSuccess = 0,
  commuxInvalidArgument = 1, /* the caller's arguments are wrong; nothing moved */
  commuxInvalidUsage = 2,    /* not in this state: a destroyed or aborted communicator */
  commuxRemoteError = 3,     /* communication failed: a peer died or disagreed */
  commuxSystemError = 4,     /* the bootstrap store or the system failed (connect, memory) */
  commuxUnsupported = 5,     /* not implemented for these arguments */
  commuxInternalError = 6,   /* a bug in commux: please report it */
  commuxInProgress = 7,      /* commuxTest: not done yet */
  commuxTimeout = 8          /* the operation ran past its timeout and was cancelled */
} commuxResult_t;

typedef enum {
  commuxInt8 = 0,
  commuxUint8 = 1,
  commuxInt16 = 2,
  commuxInt32 = 3,
  commuxInt64 = 4,
  commuxFloat16 = 5,
  commuxBfloat16 = 6,
  commuxFloat32 = 7,
  commuxFloat64 = 8,
  commuxBool = 9, /* one byte, 0 or 1 */
  commuxComplex64 = 10,
  commuxComplex128 = 11,
  commuxNumTypes = 12,
  /* Not a type: holds the enum's range to 32 bits, so that any value a caller passes is
   * one the library may read (and refuse). */
  commuxDataTypeForce32 = 0x7fffffff
} commuxDataType_t;

typedef enum {
  commuxSum = 0,
  commuxProd = 1,
  commuxMin = 2,
  commuxMax = 3,
  commuxBand = 4, /* integers and bool only */
  commuxBor = 5,
  commuxBxor = 6,
  commuxNumOps = 7,
  commuxRedOpForce32 = 0x7fffffff /* not an operation: see commuxDataTypeForce32 */
} commuxRedOp_t;

/* Any sender, for commuxRecv/commuxIrecv's `peer`. */
#define COMMUX_ANY_SOURCE (-1)
/* Tags are 0 .. COMMUX_TAG_MAX. */
#define COMMUX_TAG_MAX 2147483647

typedef struct commuxComm* commuxComm_t;
typedef struct commuxRequest* commuxRequest_t;
typedef struct commuxWin* commuxWin_t;
typedef struct commuxExchange* commuxExchange_t;

/* Names the job's meeting point: where the bootstrap store of the rank that made it
 * listens, and a random secret that keeps other jobs out. Opaque; copy it as bytes. */
#define COMMUX_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[COMMUX_UNIQUE_ID_BYTES];
} commuxUniqueId;

/* What a completed receive got. */
typedef struct {
  int source; /* the sender's rank (useful after COMMUX_ANY_SOURCE) */
  int tag;
} commuxStatus;

/* ---- Errors and version ------------------------------------------------------------- */

/* A fixed name for a code. */
const char* commuxGetErrorString(commuxResult_t result);
/* The message of the last failed call on this thread (any communicator; `comm` is
 * accepted for NCCL's shape and may be NULL). Valid until this thread's next call. */
const char* commuxGetLastError(commuxComm_t comm);
commuxResult_t commuxGetVersion(int* version);

/* ---- Communicators ------------------------------------------------------------------ */

/* Makes a unique id and starts this process's bootstrap store on a thread of its own (it
 * serves for as long as the process lives). Call it on one rank, send the id to the others
 * (MPI_Bcast, a file, a socket), then every rank calls commuxCommInitRank with it. The
 * store listens only on the address the id names: COMMUX_BOOTSTRAP_ADDRESS when set, else
 * the first IPv4 address of an interface that is up and not loopback, else 127.0.0.1. The
 * id's random secret is never sent: the store and each rank prove to each other that they
 * hold it, so a rank never joins another job's store (nor a later one on the same port). */
commuxResult_t commuxGetUniqueId(commuxUniqueId* uniqueId);

/* Collective over `nranks` processes: each calls it with its `rank` (0 .. nranks - 1) and
 * the same id; it returns once this rank is reachable by the others (peers are connected
 * lazily, shared memory at the first collective). The same id may be used again after a
 * failure (destroy, then init again on every rank, a restarted process included): the
 * store counts each rank's inits, and the n-th init of every rank makes the n-th
 * communicator, apart from the earlier ones. The process that made the id (its store) must
 * live on. A rank joined from two live processes, or ranks that name two sizes, fail every
 * rank that met at the store (commuxRemoteError, naming the port): the communicators made
 * there are aborted and refuse every call. Fails with commuxSystemError when the
 * store cannot be reached within the timeout or belongs to another job, and with
 * commuxInvalidArgument for a bad rank or size, or an id that is not one. */
commuxResult_t commuxCommInitRank(commuxComm_t* comm, int nranks, commuxUniqueId uniqueId,
                                  int rank);

/* commuxCommInitRank with the rank, size and meeting point from the environment:
 * the rank from COMMUX_RANK, RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID; the size
 * from COMMUX_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS (the first
 * set, in this order); the store at COMMUX_BOOTSTRAP=host:port, which rank 0 serves
 * (on that address alone: name one of rank 0's host's addresses that the others reach)
 * and the others reach. The job's secret comes from the launcher's job id (torchrun's run
 * id, Open MPI's, PMIx's, Slurm's job and step, ...) and COMMUX_BOOTSTRAP_SECRET (any text,
 * the same on every rank of the job): ranks with another secret fail at once, naming the
 * port. With neither, two jobs on one port share a secret and the store fails every rank of
 * both as soon as it sees them meet (a rank twice, two sizes, a second rank 0): set
 * COMMUX_BOOTSTRAP_SECRET, or give each job its own port. */
commuxResult_t commuxCommInitFromEnv(commuxComm_t* comm);

/* The orderly end, collective: returns once every rank has called it, each after every
 * operation it started on `comm` completed, so that no rank's exit or commuxCommDestroy
 * fails a peer's last operation (a rank that leaves looks dead to a peer still finishing a
 * collective with it; a barrier does not prevent that, since a rank leaves a barrier
 * before its peers are done with it). It meets through the bootstrap store, not the
 * transports; the process that serves the store also waits until every rank has left.
 * Fails with commuxRemoteError when a member dies first, and with commuxTimeout after the
 * communicator's timeout. */
commuxResult_t commuxCommFinalize(commuxComm_t comm);

/* Collective over `comm`: ranks that pass the same `color` (>= 0) form a new communicator,
 * ranked by `key`, then by their rank in `comm`; a rank that passes COMMUX_SPLIT_NOCOLOR
 * takes part but gets NULL. The new communicator has `comm`'s timeout and meets through
 * the same bootstrap store; it is independent of `comm` (destroy each on its own). */
#define COMMUX_SPLIT_NOCOLOR (-1)
commuxResult_t commuxCommSplit(commuxComm_t comm, int color, int key, commuxComm_t* newcomm);

/* For the survivors of a failure: a new communicator of every rank of `comm` but the
 * `excludeCount` ranks in `excludeRanks`, numbered in `comm`'s order. Only the survivors
 * call it, all with the same ranks and in the same order among their shrinks of `comm`; it
 * needs nothing of the excluded ranks (dead or not), only the bootstrap store, which lives
 * in the process of the rank that served it (rank 0 of a unique id): that rank cannot be
 * excluded unless the store is served elsewhere (COMMUX_BOOTSTRAP). COMMUX_SHRINK_ABORT
 * first aborts `comm` (what it has in flight here ends with an error; it then refuses every
 * call but destroy). The
 * new communicator has `comm`'s timeout; destroy each on its own. Errors:
 * commuxInvalidArgument for an excluded rank out of range or twice, this rank excluded, or
 * every rank excluded; commuxSystemError or commuxTimeout when the store cannot be reached
 * or the survivors do not all come. */
#define COMMUX_SHRINK_DEFAULT 0
#define COMMUX_SHRINK_ABORT 1
commuxResult_t commuxCommShrink(commuxComm_t comm, const int* excludeRanks, int excludeCount,
                                int flags, commuxComm_t* newcomm);

/* Frees the communicator. Operations still in flight are cancelled first. To end a job,
 * call commuxCommFinalize first (see there). A communicator that an open
 * commuxGroupStart/End group holds (on any thread) is not freed: commuxInvalidUsage, and it
 * stays usable; end the group first. */
commuxResult_t commuxCommDestroy(commuxComm_t comm);

/* Cancels every operation in flight on `comm` (they complete with commuxRemoteError) and
 * refuses later calls on it but commuxCommDestroy. Thread safe: call it from another
 * thread to break a wait. */
commuxResult_t commuxCommAbort(commuxComm_t comm);

commuxResult_t commuxCommCount(commuxComm_t comm, int* count);
commuxResult_t commuxCommUserRank(commuxComm_t comm, int* rank);

/* The timeout of every later operation on `comm`, in milliseconds (0: none). */
commuxResult_t commuxCommSetTimeout(commuxComm_t comm, int64_t milliseconds);

/* commuxSuccess while every member is alive and no collective failed here; otherwise the
 * error (commuxRemoteError), with commuxGetLastError saying which ranks died and why. Never
 * waits and moves nothing. */
commuxResult_t commuxCommGetAsyncError(commuxComm_t comm, commuxResult_t* asyncError);

/* ---- Tagged messages ---------------------------------------------------------------- */

/* Sends `count` elements of `datatype` at `buf` to rank `peer` with `tag`. */
commuxResult_t commuxSend(const void* buf, size_t count, commuxDataType_t datatype, int peer,
                          int tag, commuxComm_t comm, void* stream);
/* Receives the next message with `tag` from `peer` (or COMMUX_ANY_SOURCE) into `buf`; the
 * message must be exactly `count` elements of `datatype` (a longer one is an error).
 * `status` may be NULL. Between commuxGroupStart and commuxGroupEnd the receive completes at
 * commuxGroupEnd, and `status` is written at the call with `peer` and `tag` as given: use
 * commuxIrecv to learn an any-source sender there. */
commuxResult_t commuxRecv(void* buf, size_t count, commuxDataType_t datatype, int peer, int tag,
                          commuxComm_t comm, void* stream, commuxStatus* status);

/* Non-blocking: post the operation and return a request; the buffer belongs to commux
 * until commuxWait returns or commuxTest reports done. Every request is freed by
 * commuxWait, by a commuxTest that reports done, or by commuxRequestFree. */
commuxResult_t commuxIsend(const void* buf, size_t count, commuxDataType_t datatype, int peer,
                           int tag, commuxComm_t comm, void* stream, commuxRequest_t* request);
commuxResult_t commuxIrecv(void* buf, size_t count, commuxDataType_t datatype, int peer,
                           int tag, commuxComm_t comm, void* stream, commuxRequest_t* request);
/* Sets *done to 1 and frees the request once the operation is done (returning its error,
 * if any), else sets it to 0 and returns commuxSuccess. Never waits. `status` may be NULL. */
commuxResult_t commuxTest(commuxRequest_t request, int* done, commuxStatus* status);
/* Waits for the operation (up to its communicator's timeout), frees the request and
 * returns the operation's result. `status` may be NULL. */
commuxResult_t commuxWait(commuxRequest_t request, commuxStatus* status);
/* Frees a request without waiting for its message: an operation still in flight is
 * cancelled first, and the call returns once it has ended (a receive UCX is already filling
 * is let finish, as under Timeouts; after 10 s it returns commuxRemoteError saying the
 * buffer may yet change). A send cannot be recalled: see Timeouts. */
commuxResult_t commuxRequestFree(commuxRequest_t request);

/* ---- Grouped calls ------------------------------------------------------------------ */

/* Between commuxGroupStart and commuxGroupEnd, on this thread, blocking calls only post
 * their operation, and commuxGroupEnd posts them together and waits for all of them,
 * returning the first error. Groups nest; the outermost end does the work. */
commuxResult_t commuxGroupStart(void);
commuxResult_t commuxGroupEnd(void);

/* ---- Memory ------------------------------------------------------------------------- */

/* Registers [buff, buff + size) with the communicator's transports (UCX's memory map) so
 * that operations on it skip per-call registration where a transport needs one (RDMA
 * networks); on shared memory, CMA and TCP nothing needs it and it costs only the call.
 * The memory must stay allocated until commuxCommDeregister. Thread safe. */
commuxResult_t commuxCommRegister(commuxComm_t comm, void* buff, size_t size, void** handle);
/* Undoes commuxCommRegister; an unknown handle is refused with commuxInvalidArgument. */
commuxResult_t commuxCommDeregister(commuxComm_t comm, void* handle);

/* Allocates `size` bytes of host memory that this host's processes can map (a shared
 * memory file, page aligned and zeroed), usable as any buffer of the calls above: what
 * "symmetric" memory is on one host. Free it with commuxMemFree. Thread safe. */
commuxResult_t commuxMemAlloc(void** ptr, size_t size);
/* Frees what commuxMemAlloc returned; another pointer is refused with commuxInvalidArgument. */
commuxResult_t commuxMemFree(void* ptr);

/* ---- One-sided windows ------------------------------------------------------------- *
 * Each rank exposes `bytes` of its memory; a put writes into a peer's window without the
 * peer taking part, and a signal tells it the puts before it have landed: a wait for that
 * signal returns only once they are in its memory. Puts and signals travel as UCX messages
 * (a rank's own window takes a copy), so a waiting rank sleeps. Windows are made and freed
 * collectively, in the same order on every rank; the calls on one window may come from any
 * thread, but not while it is being freed. */

/* Collective over `comm`: exposes [base, base + bytes) (host memory; NULL for 0 bytes). The
 * memory must stay allocated until commuxWinFree returns. */
commuxResult_t commuxWinCreate(commuxComm_t comm, void* base, size_t bytes, commuxWin_t* win);
/* Writes `bytes` at `data` `offset` bytes into rank `target`'s window; returns once `data`
 * may be reused. The target sees the data when a later signal from this rank reaches it
 * (commuxWinWaitSignal) or after commuxWinFlush. A put that does not fit the target's
 * window is refused with commuxInvalidArgument before anything moves. */
commuxResult_t commuxWinPut(commuxWin_t win, const void* data, size_t bytes, int target,
                            size_t offset);
/* A put and a signal after it, in one message where the data is small. */
commuxResult_t commuxWinPutSignal(commuxWin_t win, const void* data, size_t bytes, int target,
                                  size_t offset);
/* A signal to `target`, released there once every put this rank sent it before landed. */
commuxResult_t commuxWinSignal(commuxWin_t win, int target);
/* Waits (up to the communicator's timeout) for one signal from rank `source`. */
commuxResult_t commuxWinWaitSignal(commuxWin_t win, int source);
/* Returns once every put this rank sent `target` landed in its window. */
commuxResult_t commuxWinFlush(commuxWin_t win, int target);
/* Collective: returns once every rank freed the window, after every put into it landed;
 * the handle is freed even when that fails (a dead rank). */
commuxResult_t commuxWinFree(commuxWin_t win);

/* ---- Collectives -------------------------------------------------------------------- *
 * Every rank of the communicator calls them in the same order with matching arguments.
 * `sendbuf` may equal `recvbuf` (in place) where the description says so. */

/* recvbuf = op over ranks of sendbuf (count elements each). In place when equal. */
commuxResult_t commuxAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                               commuxDataType_t datatype, commuxRedOp_t op, commuxComm_t comm,
                               void* stream);
/* On `root`, recvbuf = op over ranks of sendbuf; recvbuf is used only on root (NULL
 * elsewhere is fine). */
commuxResult_t commuxReduce(const void* sendbuf, void* recvbuf, size_t count,
                            commuxDataType_t datatype, commuxRedOp_t op, int root,
                            commuxComm_t comm, void* stream);
/* recvbuf on every rank = root's sendbuf (sendbuf is read only on root). */
commuxResult_t commuxBroadcast(const void* sendbuf, void* recvbuf, size_t count,
                               commuxDataType_t datatype, int root, commuxComm_t comm,
                               void* stream);
/* recvbuf (nranks x sendcount) = every rank's sendbuf in rank order. In place when sendbuf
 * is this rank's block of recvbuf. */
commuxResult_t commuxAllGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                               commuxDataType_t datatype, commuxComm_t comm, void* stream);
/* recvbuf (recvcount) = block `rank` of op over ranks of sendbuf (nranks x recvcount). */
commuxResult_t commuxReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                   commuxDataType_t datatype, commuxRedOp_t op,
                                   commuxComm_t comm, void* stream);
/* Block d of sendbuf (count elements) goes to rank d; block s of recvbuf comes from s. */
commuxResult_t commuxAllToAll(const void* sendbuf, void* recvbuf, size_t count,
                              commuxDataType_t datatype, commuxComm_t comm, void* stream);
/* As commuxAllToAll with blocks of sendcounts[d] and recvcounts[s] elements, packed in
 * rank order (each array has nranks entries). Rank s's sendcounts[d] must equal rank d's
 * recvcounts[s]. With COMMUX_CHECK_COLLECTIVES=1 a mismatch is found before any byte moves
 * and every rank gets commuxInvalidArgument naming the first pair that differs (the
 * communicator goes on); without it, a receive that does not fit fails. */
commuxResult_t commuxAllToAllv(const void* sendbuf, const size_t* sendcounts, void* recvbuf,
                               const size_t* recvcounts, commuxDataType_t datatype,
                               commuxComm_t comm, void* stream);
/* On root, recvbuf (nranks x sendcount) = every rank's sendbuf in rank order. */
commuxResult_t commuxGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                            commuxDataType_t datatype, int root, commuxComm_t comm, void* stream);
/* recvbuf (recvcount) on every rank = block `rank` of root's sendbuf (nranks x recvcount). */
commuxResult_t commuxScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                             commuxDataType_t datatype, int root, commuxComm_t comm, void* stream);
/* Returns once every rank has entered it. */
commuxResult_t commuxBarrier(commuxComm_t comm, void* stream);

/* ---- Neighbourhood exchanges (halo exchanges) ---------------------------------------- *
 * Built once, started every step: each step swaps one message with each neighbour, sent
 * from and received into the caller's memory as it lies (a UCX iov of its pieces) or, for
 * many short pieces, packed by the exchange. What is set up once (neighbours, layouts,
 * staging) is not redone per step. Host memory; the memory must stay allocated, and the
 * communicator alive, until commuxExchangeFree. A step moves nothing another step's does:
 * each exchange uses its own `tag` (give exchanges that may be in flight together distinct
 * tags, and keep them apart from the tags of the code's own messages). */

/* A piece of a message: `bytes` contiguous bytes at `data`. */
typedef struct {
  void* data;
  size_t bytes;
} commuxPiece;

/* This rank's messages with rank `rank` each step: `send` (sendCount pieces, in order) go
 * to it as one message, its message fills `recv` (recvCount pieces). send == NULL: none
 * goes to it; recv == NULL: none comes from it (not both). A rank may be its own neighbour
 * (a copy; its send and receive memory must not overlap). */
typedef struct {
  int rank;
  const commuxPiece* send;
  size_t sendCount;
  const commuxPiece* recv;
  size_t recvCount;
} commuxNeighbour;

/* MPI_Dims_create: fills the 0 entries of dims[ndims] with a balanced factorisation of
 * nranks (the others kept). commuxInvalidArgument if the kept ones do not divide it. */
commuxResult_t commuxDimsCreate(int nranks, int ndims, int* dims);

/* An exchange along a graph: `count` neighbours, each rank named once. Local (no rank waits
 * for another here); what a neighbour sends must be as long as what this rank receives from
 * it, or the step fails (commuxInvalidArgument naming both sizes). */
commuxResult_t commuxExchangeCreate(commuxComm_t comm, const commuxNeighbour* neighbours,
                                    size_t count, int tag, commuxExchange_t* exchange);

/* A halo exchange on a Cartesian grid of dims[ndims] ranks (their product the
 * communicator's size, ranks in row-major order as MPI_Cart_create lays them out),
 * periodic[d] nonzero for a periodic dimension, diagonals nonzero for the edge and corner
 * neighbours too (27-point stencils). Each of the nfields fields is a dense row-major array
 * of shape[fieldNdims] elements of types[i] (fieldNdims >= ndims: the grid's dimensions
 * first, trailing ones whole) holding widths[d] ghost cells on both sides of each grid
 * dimension d. The face a rank sends towards side d fills its neighbour's ghost cells on
 * side -d, also where one rank is both neighbours (periodic size 2) or the rank itself
 * (size 1). Collective: every rank of the communicator calls it with the same grid, tag,
 * widths and field types, and shapes that agree on their shared faces; the ranks check that
 * together (two allgathers, within the communicator's timeout) and all return
 * commuxInvalidArgument, the message naming the ranks and what differs, when they do not,
 * also when one rank's own arguments are refused. Being collective, it runs at once
 * (commuxInvalidUsage inside commuxGroupStart/End) and fails, like every collective, once
 * a collective of the communicator has failed (its steps are point-to-point and would still
 * run: a new communicator, or commuxExchangeCreate, goes on). */
commuxResult_t commuxHaloCreate(commuxComm_t comm, int ndims, const int* dims,
                                const int* periodic, int diagonals, int nfields,
                                void* const* fields, const commuxDataType_t* types,
                                int fieldNdims, const int64_t* shape, const int64_t* widths,
                                int tag, commuxExchange_t* exchange);

/* Posts the step's receives and sends. */
commuxResult_t commuxExchangeStart(commuxExchange_t exchange);
/* Partitioned steps: posts the step's receives only. Then commuxExchangeReady sends the
 * message to a neighbour as soon as its memory holds this step's values (the faces next
 * to it computed), and commuxExchangeWait sends whatever was not marked ready. */
commuxResult_t commuxExchangeStartReceives(commuxExchange_t exchange);
/* Sends this step's message to neighbour `rank` now. Nothing for this rank itself or a
 * neighbour it sends nothing; commuxInvalidUsage outside a step or when that message
 * already went, commuxInvalidArgument for a rank that is no neighbour. */
commuxResult_t commuxExchangeReady(commuxExchange_t exchange, int rank);
/* Waits (up to the communicator's timeout, for the whole step) for the step, then copies
 * this rank's own message: its received memory is filled when it returns commuxSuccess. On
 * an error (a dead neighbour, a size mismatch, the timeout) the step is over on this rank
 * but may not be on its neighbours, whose late messages would match the next step's
 * receives: free the exchange and build a new one with another tag on every rank (or a new
 * communicator after a death). */
commuxResult_t commuxExchangeWait(commuxExchange_t exchange);
/* Without blocking (MPI_Test's way): sends whatever was not marked ready, as
 * commuxExchangeWait would, and sets *done to 1 once the step has ended (its received memory
 * filled; the step is then over, as after commuxExchangeWait), else 0. The step's error
 * when it ended with one (it is over then, as after a failed commuxExchangeWait; *done is
 * 0). Only commuxExchangeWait times a step out. */
commuxResult_t commuxExchangeTest(commuxExchange_t exchange, int* done);
/* Ends a step in flight, then frees the exchange. */
commuxResult_t commuxExchangeFree(commuxExchange_t exchange);

#ifdef __cplusplus
}
#endif

#endif /* COMMUX_COMMUX_H */
