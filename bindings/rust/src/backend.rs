//! The engines' communication trait, and commux's implementation of it.
use std::os::raw::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::comm::{host_ptr, to_int};
use crate::{check, ffi, Comm, DataType, Error, ReduceOp, Result, UniqueId};

/// What an inference engine asks of its communication layer: raw host or device addresses
/// as `u64` and sizes in bytes. Every rank calls the collectives in the same order.
pub trait CommBackend: Send + Sync {
    /// Sums `bytes` at `ptr` over all ranks, in place on every rank.
    fn all_reduce(&self, ptr: u64, bytes: usize) -> Result<()>;
    /// Each rank's `bytes` at `send_ptr` land, in rank order, in `recv_ptr` (world_size x
    /// bytes) on every rank.
    fn all_gather(&self, send_ptr: u64, recv_ptr: u64, bytes: usize) -> Result<()>;
    /// The sum over ranks of `send_ptr` (world_size x bytes), of which this rank keeps its
    /// block (`bytes`) in `recv_ptr`.
    fn reduce_scatter(&self, send_ptr: u64, recv_ptr: u64, bytes: usize) -> Result<()>;
    /// `bytes` at `ptr` on `root` replace those at `ptr` on every rank.
    fn broadcast(&self, ptr: u64, bytes: usize, root: usize) -> Result<()>;
    /// An idle non-root rank's wait for the 4 bytes of the next command from `root`: no
    /// deadline, yet a transport failure (the root's death) ends it with an error.
    fn recv_command_u32(&self, ptr: u64, root: usize) -> Result<()> {
        if self.rank() == root {
            return Err(Error::invalid("commux: recv_command_u32 is for ranks other than the root"));
        }
        self.broadcast(ptr, 4, root)
    }
    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
    /// all_reduce, ordered after the work queued on `compute_stream`.
    fn all_reduce_async(&self, ptr: u64, bytes: usize, compute_stream: u64) -> Result<()> {
        let _ = compute_stream;
        self.all_reduce(ptr, bytes)
    }
    /// Registers a buffer for later calls; the handle undoes it.
    fn register_buffer(&self, _ptr: u64, _bytes: usize) -> Result<u64> {
        Ok(0)
    }
    fn deregister_buffer(&self, _handle: u64) -> Result<()> {
        Ok(())
    }
    /// Memory the ranks' peers can reach directly; backends without it refuse.
    fn symmetric_alloc(&self, _bytes: usize) -> Result<u64> {
        Err(Error::new(ffi::UNSUPPORTED, "symmetric_alloc: not supported by this backend"))
    }
    fn symmetric_free(&self, _ptr: u64) -> Result<()> {
        Err(Error::new(ffi::UNSUPPORTED, "symmetric_free: not supported by this backend"))
    }
    /// A fold kernel some backends need for their own reductions.
    fn set_add_kernel(&self, _handle: u64) {}
    /// `bytes` at `ptr` to `dest_rank`, matched in order by its `recv_from` from this rank.
    fn send_to(&self, ptr: u64, bytes: usize, dest_rank: usize, stream: u64) -> Result<()>;
    fn recv_from(&self, ptr: u64, bytes: usize, src_rank: usize, stream: u64) -> Result<()>;
    /// Between these, this thread's send_to/recv_from are posted together.
    fn group_start(&self) -> Result<()> {
        Ok(())
    }
    fn group_end(&self) -> Result<()> {
        Ok(())
    }
    /// False once a peer died, or an operation failed on the transport or ran past its
    /// timeout, until `attempt_reconnect` succeeds.
    fn is_healthy(&self) -> bool {
        true
    }
    /// Every rank calls it after a failure (a restarted process makes its backend anew):
    /// the old communicator is aborted and a new one made among them.
    fn attempt_reconnect(&self) -> Result<()> {
        Ok(())
    }
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
}

/// How a [`CommuxBackend`] makes its communicator, again at each reconnect.
#[derive(Clone, Copy)]
pub enum Recipe {
    /// commuxCommInitFromEnv (COMMUX_RANK, COMMUX_SIZE, COMMUX_BOOTSTRAP, or a launcher's).
    Environment,
    /// commuxCommInitRank with a unique id.
    Id { id: UniqueId, rank: usize, size: usize },
    /// The survivors of a failure ([`CommuxBackend::shrink`]): nothing to make again from.
    Survivors,
}

impl Recipe {
    fn make(&self) -> Result<Comm> {
        match self {
            Recipe::Environment => Comm::from_env(),
            Recipe::Id { id, rank, size } => Comm::init_rank(*size, id, *rank),
            Recipe::Survivors => Err(Error::new(
                ffi::INVALID_USAGE,
                "commux: a backend of survivors (shrink) cannot be made again from a recipe; shrink it again",
            )),
        }
    }
}

/// The tag of the trait's messages: it has none, and one tag keeps NCCL's order per peer.
const MESSAGE_TAG: i32 = 0;

/// Whether a call's error leaves the communicator to be rebuilt: a transport error (a dead
/// or disagreeing peer), a timeout (what was in flight is cancelled, the ranks may be out of
/// step), a system error, a refusal by an aborted communicator. Refusals before anything
/// moved (bad arguments, what the build does not support) leave it healthy.
fn breaks(error: &Error) -> bool {
    !matches!(error.code, ffi::INVALID_ARGUMENT | ffi::UNSUPPORTED)
}

/// [`CommBackend`] over commux. The collectives and messages of all threads go one at a
/// time (the trait's users order them anyway), so a call's timeout is its own;
/// `is_healthy`, `rank` and `world_size` never wait. `is_healthy` turns false when an
/// operation fails on the transport or times out, and when the library sees a member die,
/// and stays false until `attempt_reconnect` succeeds.
pub struct CommuxBackend {
    recipe: Recipe,
    comm: RwLock<Comm>,
    calls: Mutex<()>,
    /// An operation on the current communicator failed (see [`breaks`]).
    broken: AtomicBool,
    dtype: DataType,
    timeout_ms: i64,
    rank: usize,
    size: usize,
    stream: AtomicU64,
}

impl CommuxBackend {
    /// `dtype`: the element type all_reduce and reduce_scatter add (the engines' BF16, say).
    /// `timeout_ms`: every call's limit but recv_command_u32's (0: none).
    pub fn new(recipe: Recipe, dtype: DataType, timeout_ms: i64) -> Result<Self> {
        let comm = recipe.make()?;
        comm.set_timeout_ms(timeout_ms)?;
        let (rank, size) = (comm.rank()?, comm.size()?);
        Ok(CommuxBackend {
            recipe,
            comm: RwLock::new(comm),
            calls: Mutex::new(()),
            broken: AtomicBool::new(false),
            dtype,
            timeout_ms,
            rank,
            size,
            stream: AtomicU64::new(0),
        })
    }

    /// For the survivors of a failure: a backend over every rank but `exclude`, numbered in
    /// this one's order (commuxCommShrink, the mechanism of torch's shrink_group). Only the
    /// survivors call it, each with the same ranks, after `is_healthy` turned false; this
    /// backend is aborted first (a call waiting in it ends with an error) and keeps
    /// refusing calls. The new one has this one's element type, timeout and stream; its
    /// `attempt_reconnect` cannot rebuild it (shrink it again instead).
    pub fn shrink(&self, exclude: &[usize]) -> Result<CommuxBackend> {
        let fresh = {
            // Not under the call lock: a call waiting on a dead peer holds it until the
            // abort inside commuxCommShrink ends that wait.
            let comm = self.comm.read().unwrap_or_else(|e| e.into_inner());
            comm.shrink(exclude, true)?
        };
        fresh.set_timeout_ms(self.timeout_ms)?;
        let (rank, size) = (fresh.rank()?, fresh.size()?);
        Ok(CommuxBackend {
            recipe: Recipe::Survivors,
            comm: RwLock::new(fresh),
            calls: Mutex::new(()),
            broken: AtomicBool::new(false),
            dtype: self.dtype,
            timeout_ms: self.timeout_ms,
            rank,
            size,
            stream: AtomicU64::new(self.stream.load(Ordering::Relaxed)),
        })
    }

    /// The CUDA stream (a `cudaStream_t`) on which the calls that name none (all_reduce,
    /// all_gather, reduce_scatter, broadcast, and those given stream 0) run, their pointers
    /// then in device memory; 0, the default: host memory. Needs a libcommux_core built with
    /// CUDA (else those calls fail with UNSUPPORTED).
    pub fn use_stream(&self, stream: u64) {
        self.stream.store(stream, Ordering::Relaxed);
    }

    /// `given`, or when 0 the stream of [`use_stream`](Self::use_stream), as the C API takes it.
    fn stream_for(&self, given: u64) -> *mut c_void {
        let stream = if given != 0 { given } else { self.stream.load(Ordering::Relaxed) };
        stream as usize as *mut c_void
    }

    /// Runs `f` on the communicator, one call at a time; an error that breaks it (see
    /// [`breaks`]) makes the backend unhealthy.
    fn call<T>(&self, f: impl FnOnce(ffi::commuxComm_t) -> Result<T>) -> Result<T> {
        let _one = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let comm = self.comm.read().unwrap_or_else(|e| e.into_inner());
        self.note(f(comm.raw()))
    }

    /// `result`, after marking the backend unhealthy when it is an error that breaks the
    /// communicator.
    fn note<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(error) = &result {
            if breaks(error) {
                self.broken.store(true, Ordering::SeqCst);
            }
        }
        result
    }

    /// The orderly end, every rank together, before the process exits: no rank leaves
    /// while a peer still finishes an operation with it (the trait has no such call; an
    /// engine's shutdown path calls this).
    pub fn finalize(&self) -> Result<()> {
        let _one = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        self.note(self.comm.read().unwrap_or_else(|e| e.into_inner()).finalize())
    }

    fn check_root(&self, root: usize, what: &str) -> Result<()> {
        if root >= self.size {
            return Err(Error::invalid(format!(
                "commux: {what}: root {root} is not a rank of {} ranks",
                self.size
            )));
        }
        Ok(())
    }

    /// all_reduce on `stream` (0: the backend's, see use_stream).
    fn all_reduce_on(&self, ptr: u64, bytes: usize, stream: u64) -> Result<()> {
        let count = self.dtype.count(bytes, "all_reduce")?;
        let buf = host_ptr(ptr, bytes, "all_reduce")?;
        let stream = self.stream_for(stream);
        self.call(|comm| {
            // SAFETY: in place on the caller's `bytes` at `ptr`.
            check(unsafe {
                ffi::commuxAllReduce(buf, buf, count, self.dtype.raw(), ReduceOp::Sum as i32, comm, stream)
            })
        })
    }

    fn message(&self, send: bool, ptr: u64, bytes: usize, peer: usize, stream: u64) -> Result<()> {
        let what = if send { "send_to" } else { "recv_from" };
        let buf = host_ptr(ptr, bytes, what)?;
        let peer = to_int(peer, "peer")?;
        let stream = self.stream_for(stream);
        self.call(|comm| {
            // SAFETY: the caller owns `bytes` at `ptr` for the call (the trait's contract).
            check(unsafe {
                if send {
                    ffi::commuxSend(buf, bytes, DataType::Uint8.raw(), peer, MESSAGE_TAG, comm, stream)
                } else {
                    ffi::commuxRecv(buf, bytes, DataType::Uint8.raw(), peer, MESSAGE_TAG, comm, stream,
                                    ptr::null_mut())
                }
            })
        })
    }
}

impl CommBackend for CommuxBackend {
    fn all_reduce(&self, ptr: u64, bytes: usize) -> Result<()> {
        self.all_reduce_on(ptr, bytes, 0)
    }

    fn all_gather(&self, send_ptr: u64, recv_ptr: u64, bytes: usize) -> Result<()> {
        let total = bytes.checked_mul(self.size).ok_or_else(|| Error::invalid("commux: all_gather: size overflows"))?;
        let send = host_ptr(send_ptr, bytes, "all_gather")?;
        let recv = host_ptr(recv_ptr, total, "all_gather")?;
        self.call(|comm| {
            // SAFETY: `bytes` at send, world_size x bytes at recv, the caller's.
            check(unsafe {
                ffi::commuxAllGather(send, recv, bytes, DataType::Uint8.raw(), comm, self.stream_for(0))
            })
        })
    }

    fn reduce_scatter(&self, send_ptr: u64, recv_ptr: u64, bytes: usize) -> Result<()> {
        let count = self.dtype.count(bytes, "reduce_scatter")?;
        let total = bytes.checked_mul(self.size).ok_or_else(|| Error::invalid("commux: reduce_scatter: size overflows"))?;
        let send = host_ptr(send_ptr, total, "reduce_scatter")?;
        let recv = host_ptr(recv_ptr, bytes, "reduce_scatter")?;
        self.call(|comm| {
            // SAFETY: world_size x bytes at send, `bytes` at recv, the caller's.
            check(unsafe {
                ffi::commuxReduceScatter(send, recv, count, self.dtype.raw(), ReduceOp::Sum as i32,
                                         comm, self.stream_for(0))
            })
        })
    }

    fn broadcast(&self, ptr: u64, bytes: usize, root: usize) -> Result<()> {
        self.check_root(root, "broadcast")?;
        let buf = host_ptr(ptr, bytes, "broadcast")?;
        let root = to_int(root, "root")?;
        self.call(|comm| {
            // SAFETY: in place on the caller's `bytes` at `ptr`.
            check(unsafe {
                ffi::commuxBroadcast(buf, buf, bytes, DataType::Uint8.raw(), root, comm, self.stream_for(0))
            })
        })
    }

    fn recv_command_u32(&self, ptr: u64, root: usize) -> Result<()> {
        if self.rank == root {
            return Err(Error::invalid("commux: recv_command_u32 is for ranks other than the root"));
        }
        self.check_root(root, "recv_command_u32")?;
        let buf = host_ptr(ptr, 4, "recv_command_u32")?;
        let root = to_int(root, "root")?;
        self.call(|comm| {
            // No deadline: the wait sleeps in the engine and ends with an error when the
            // root (any member) dies or the communicator is aborted. The timeout is this
            // call's alone: calls go one at a time.
            // SAFETY: a live handle; 4 bytes at `ptr`, the caller's.
            check(unsafe { ffi::commuxCommSetTimeout(comm, 0) })?;
            let result = check(unsafe {
                ffi::commuxBroadcast(buf, buf, 4, DataType::Uint8.raw(), root, comm, ptr::null_mut())
            });
            // SAFETY: a live handle.
            let restored = check(unsafe { ffi::commuxCommSetTimeout(comm, self.timeout_ms) });
            result.and(restored)
        })
    }

    fn barrier(&self) -> Result<()> {
        // SAFETY: a live handle.
        self.call(|comm| check(unsafe { ffi::commuxBarrier(comm, ptr::null_mut()) }))
    }

    fn all_reduce_async(&self, ptr: u64, bytes: usize, compute_stream: u64) -> Result<()> {
        self.all_reduce_on(ptr, bytes, compute_stream)
    }

    fn register_buffer(&self, ptr: u64, bytes: usize) -> Result<u64> {
        let buf = host_ptr(ptr, bytes, "register_buffer")?;
        let comm = self.comm.read().unwrap_or_else(|e| e.into_inner());
        let mut handle: *mut c_void = ptr::null_mut();
        // SAFETY: a live handle and a valid out-pointer; the caller keeps the memory.
        check(unsafe { ffi::commuxCommRegister(comm.raw(), buf, bytes, &mut handle) })?;
        Ok(handle as usize as u64)
    }

    fn deregister_buffer(&self, handle: u64) -> Result<()> {
        let comm = self.comm.read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the library checks the handle against its registrations.
        check(unsafe { ffi::commuxCommDeregister(comm.raw(), handle as usize as *mut c_void) })
    }

    fn symmetric_alloc(&self, bytes: usize) -> Result<u64> {
        let mut memory: *mut c_void = ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check(unsafe { ffi::commuxMemAlloc(&mut memory, bytes) })?;
        Ok(memory as usize as u64)
    }

    fn symmetric_free(&self, ptr: u64) -> Result<()> {
        // SAFETY: the library checks the pointer against its allocations.
        check(unsafe { ffi::commuxMemFree(ptr as usize as *mut c_void) })
    }

    fn send_to(&self, ptr: u64, bytes: usize, dest_rank: usize, stream: u64) -> Result<()> {
        self.message(true, ptr, bytes, dest_rank, stream)
    }

    fn recv_from(&self, ptr: u64, bytes: usize, src_rank: usize, stream: u64) -> Result<()> {
        self.message(false, ptr, bytes, src_rank, stream)
    }

    fn group_start(&self) -> Result<()> {
        // SAFETY: no arguments; per thread.
        check(unsafe { ffi::commuxGroupStart() })
    }

    fn group_end(&self) -> Result<()> {
        // The grouped sends and receives run here: their failures and timeouts are this
        // call's. commuxInvalidUsage here is an end without a start: the caller's.
        // SAFETY: no arguments; per thread.
        let result = check(unsafe { ffi::commuxGroupEnd() });
        match result {
            Err(error) if error.code == ffi::INVALID_USAGE => Err(error),
            result => self.note(result),
        }
    }

    fn is_healthy(&self) -> bool {
        if self.broken.load(Ordering::SeqCst) {
            return false;
        }
        match self.comm.try_read() {
            Ok(comm) => comm.async_error().is_ok(),
            Err(_) => false, // being rebuilt
        }
    }

    fn attempt_reconnect(&self) -> Result<()> {
        if let Recipe::Survivors = self.recipe {
            // Refused before the abort below: this backend goes on working.
            return self.recipe.make().map(|_| ());
        }
        // Break any wait first (a recv_command_u32 may hold the call lock forever), then
        // replace the communicator while no call uses it.
        {
            let comm = self.comm.read().unwrap_or_else(|e| e.into_inner());
            let _ = comm.abort();
        }
        let _one = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let mut comm = self.comm.write().unwrap_or_else(|e| e.into_inner());
        let fresh = self.recipe.make()?;
        fresh.set_timeout_ms(self.timeout_ms)?;
        if fresh.rank()? != self.rank || fresh.size()? != self.size {
            return Err(Error::invalid("commux: attempt_reconnect: the new communicator has another rank or size"));
        }
        *comm = fresh; // the old one is destroyed here
        self.broken.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }
}
