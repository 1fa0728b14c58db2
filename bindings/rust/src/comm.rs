//! A communicator over the C API, owned: dropping it destroys it.
use std::os::raw::{c_int, c_void};
use std::ptr;

use crate::{check, ffi, Error, Result};

/// The element types of the C API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    Int8,
    Uint8,
    Int16,
    Int32,
    Int64,
    Float16,
    Bfloat16,
    Float32,
    Float64,
}

impl DataType {
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 => 1,
            DataType::Int16 | DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Float64 => 8,
        }
    }
    pub(crate) fn raw(self) -> ffi::commuxDataType_t {
        match self {
            DataType::Int8 => 0,
            DataType::Uint8 => 1,
            DataType::Int16 => 2,
            DataType::Int32 => 3,
            DataType::Int64 => 4,
            DataType::Float16 => 5,
            DataType::Bfloat16 => 6,
            DataType::Float32 => 7,
            DataType::Float64 => 8,
        }
    }
    /// Elements in `bytes`, or an error naming `what` when they do not divide.
    pub fn count(self, bytes: usize, what: &str) -> Result<usize> {
        if bytes % self.size() != 0 {
            return Err(Error::invalid(format!(
                "commux: {what}: {bytes} bytes are not a whole number of {:?} elements ({} bytes each)",
                self,
                self.size()
            )));
        }
        Ok(bytes / self.size())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Prod = 1,
    Min = 2,
    Max = 3,
}

/// A unique id: made on one rank ([`UniqueId::new`]), its bytes given to the others.
#[derive(Clone, Copy)]
pub struct UniqueId(pub(crate) ffi::commuxUniqueId);

impl UniqueId {
    /// Makes an id and starts this process's bootstrap store (it serves while the process
    /// lives).
    pub fn new() -> Result<Self> {
        let mut id = ffi::commuxUniqueId { internal: [0; ffi::UNIQUE_ID_BYTES] };
        // SAFETY: `id` is a valid out-pointer.
        check(unsafe { ffi::commuxGetUniqueId(&mut id) })?;
        Ok(UniqueId(id))
    }
    pub fn to_bytes(&self) -> [u8; ffi::UNIQUE_ID_BYTES] {
        let mut out = [0u8; ffi::UNIQUE_ID_BYTES];
        for (o, c) in out.iter_mut().zip(self.0.internal.iter()) {
            *o = *c as u8;
        }
        out
    }
    /// The library checks the bytes when a communicator is made from them.
    pub fn from_bytes(bytes: &[u8; ffi::UNIQUE_ID_BYTES]) -> Self {
        let mut id = ffi::commuxUniqueId { internal: [0; ffi::UNIQUE_ID_BYTES] };
        for (c, b) in id.internal.iter_mut().zip(bytes.iter()) {
            *c = *b as _;
        }
        UniqueId(id)
    }
}

/// An owned commuxComm_t. The C API is thread safe, so a Comm may be shared between threads.
pub struct Comm {
    raw: ffi::commuxComm_t,
}

// SAFETY: every C API call is thread safe (commux.h); the handle is freed once, on drop.
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

impl Comm {
    pub fn init_rank(size: usize, id: &UniqueId, rank: usize) -> Result<Self> {
        let mut raw = ptr::null_mut();
        let (size, rank) = (to_int(size, "size")?, to_int(rank, "rank")?);
        // SAFETY: `raw` is a valid out-pointer; the id is passed by value.
        check(unsafe { ffi::commuxCommInitRank(&mut raw, size, id.0, rank) })?;
        Ok(Comm { raw })
    }
    /// COMMUX_RANK / COMMUX_SIZE / COMMUX_BOOTSTRAP (or a launcher's variables).
    pub fn from_env() -> Result<Self> {
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check(unsafe { ffi::commuxCommInitFromEnv(&mut raw) })?;
        Ok(Comm { raw })
    }
    pub fn raw(&self) -> ffi::commuxComm_t {
        self.raw
    }
    pub fn rank(&self) -> Result<usize> {
        let mut r: c_int = -1;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { ffi::commuxCommUserRank(self.raw, &mut r) })?;
        Ok(r as usize)
    }
    pub fn size(&self) -> Result<usize> {
        let mut n: c_int = -1;
        // SAFETY: as above.
        check(unsafe { ffi::commuxCommCount(self.raw, &mut n) })?;
        Ok(n as usize)
    }
    /// The timeout of later calls (0: none).
    pub fn set_timeout_ms(&self, ms: i64) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { ffi::commuxCommSetTimeout(self.raw, ms) })
    }
    /// Ok while healthy; the error (which ranks died) otherwise.
    pub fn async_error(&self) -> Result<()> {
        let mut async_error = ffi::SUCCESS;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { ffi::commuxCommGetAsyncError(self.raw, &mut async_error) })?;
        check(async_error)
    }
    /// The orderly end (commuxCommFinalize): returns once every rank called it, so that no
    /// rank's exit fails a peer's last operation.
    pub fn finalize(&self) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { ffi::commuxCommFinalize(self.raw) })
    }
    /// For the survivors of a failure (commuxCommShrink): a communicator of every rank but
    /// `exclude`, numbered in this one's order. Only the survivors call it, each with the
    /// same ranks; it needs nothing of the excluded ones, dead or not. `abort` first aborts
    /// this communicator (what it has in flight ends with an error).
    pub fn shrink(&self, exclude: &[usize], abort: bool) -> Result<Comm> {
        let ranks = exclude
            .iter()
            .map(|&r| to_int(r, "excluded rank"))
            .collect::<Result<Vec<c_int>>>()?;
        let count = to_int(ranks.len(), "number of excluded ranks")?;
        let flags = if abort { ffi::SHRINK_ABORT } else { ffi::SHRINK_DEFAULT };
        let mut raw = ptr::null_mut();
        // SAFETY: a live handle, `count` ranks at a valid pointer, a valid out-pointer.
        check(unsafe { ffi::commuxCommShrink(self.raw, ranks.as_ptr(), count, flags, &mut raw) })?;
        Ok(Comm { raw })
    }
    /// Cancels what is in flight and refuses later calls; safe from any thread.
    pub fn abort(&self) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { ffi::commuxCommAbort(self.raw) })
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: the handle is live and freed only here.
        unsafe {
            ffi::commuxCommDestroy(self.raw);
        }
    }
}

pub(crate) fn to_int(value: usize, what: &str) -> Result<c_int> {
    c_int::try_from(value)
        .map_err(|_| Error::invalid(format!("commux: {what} {value} does not fit a C int")))
}

/// A host pointer from the trait's u64; 0 is refused (except for 0 bytes).
pub(crate) fn host_ptr(ptr: u64, bytes: usize, what: &str) -> Result<*mut c_void> {
    if ptr == 0 && bytes != 0 {
        return Err(Error::invalid(format!("commux: {what}: null pointer for {bytes} bytes")));
    }
    Ok(ptr as usize as *mut c_void)
}
