//! commux from Rust, std only: the C API of libcommux_core ([`ffi`]), a safe communicator
//! ([`Comm`]) and [`CommuxBackend`], an implementation of [`CommBackend`], the raw-pointer
//! communication trait of the inference engines commux serves, on host memory over UCX
//! (shared memory on one host, UCX's transports between hosts).
//!
//! Element types: the trait moves bytes, but its `all_reduce` and `reduce_scatter` add
//! elements, so a [`CommuxBackend`] is told which type they are ([`DataType`]) when it is
//! made. Pointers are host memory with stream 0; with a CUDA stream (a call's own, or the
//! backend's from [`CommuxBackend::use_stream`]) they are device memory, which needs a
//! libcommux_core built with CUDA.

pub mod ffi;

mod backend;
mod comm;

pub use backend::{CommBackend, CommuxBackend, Recipe};
pub use comm::{Comm, DataType, ReduceOp, UniqueId};

use std::ffi::CStr;
use std::fmt;

/// A failed call: the C API's code and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: i32,
    pub message: String,
}

impl Error {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Error { code, message: message.into() }
    }
    /// A refusal of this crate's own, before anything reached the library.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(ffi::INVALID_ARGUMENT, message)
    }
    pub fn is_timeout(&self) -> bool {
        self.code == ffi::TIMEOUT
    }
    /// The library's last message on this thread, for a failed call's code.
    pub(crate) fn last(code: ffi::commuxResult_t) -> Self {
        // SAFETY: both return static or thread-local NUL-terminated strings.
        let (name, message) = unsafe {
            (
                CStr::from_ptr(ffi::commuxGetErrorString(code)).to_string_lossy().into_owned(),
                CStr::from_ptr(ffi::commuxGetLastError(std::ptr::null_mut()))
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let message = if message.is_empty() { name } else { message };
        Error { code, message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (commux code {})", self.message, self.code)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Ok for commuxSuccess, else the call's error.
pub(crate) fn check(code: ffi::commuxResult_t) -> Result<()> {
    if code == ffi::SUCCESS {
        Ok(())
    } else {
        Err(Error::last(code))
    }
}
