//! The C API of include/commux/commux.h, declared for Rust. Enums travel as `c_int`
//! constants: a value the library does not know must never become a Rust enum.
//!
//! The functions are those of libcommux_core, loaded at the first call (dlopen) from the
//! absolute path the build found ([`LIBRARY`]), each resolved once (dlsym). The crate is
//! not linked with the library, so a program that uses it, directly or through other
//! crates, needs no run path and no LD_LIBRARY_PATH. A library that cannot be loaded fails
//! every call with [`SYSTEM_ERROR`], commuxGetLastError saying why (see [`load`]).
#![allow(non_camel_case_types)]

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

pub type commuxResult_t = c_int;
pub type commuxDataType_t = c_int;
pub type commuxRedOp_t = c_int;

pub const SUCCESS: commuxResult_t = 0;
pub const INVALID_ARGUMENT: commuxResult_t = 1;
pub const INVALID_USAGE: commuxResult_t = 2;
pub const REMOTE_ERROR: commuxResult_t = 3;
pub const SYSTEM_ERROR: commuxResult_t = 4;
pub const UNSUPPORTED: commuxResult_t = 5;
pub const INTERNAL_ERROR: commuxResult_t = 6;
pub const IN_PROGRESS: commuxResult_t = 7;
pub const TIMEOUT: commuxResult_t = 8;

pub const ANY_SOURCE: c_int = -1;
pub const SHRINK_DEFAULT: c_int = 0;
pub const SHRINK_ABORT: c_int = 1;
pub const UNIQUE_ID_BYTES: usize = 128;

#[repr(C)]
pub struct commuxComm {
    _private: [u8; 0],
}
pub type commuxComm_t = *mut commuxComm;
#[repr(C)]
pub struct commuxRequest {
    _private: [u8; 0],
}
pub type commuxRequest_t = *mut commuxRequest;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct commuxUniqueId {
    pub internal: [c_char; UNIQUE_ID_BYTES],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct commuxStatus {
    pub source: c_int,
    pub tag: c_int,
}

/// The library this crate was built against: the absolute path build.rs found.
pub const LIBRARY: &str = env!("COMMUX_CORE_LIBRARY");
/// The library's SONAME: what the loader searches for when [`LIBRARY`] is gone.
const SONAME: &str = "libcommux_core.so.0";

// The dynamic loader, from the C library (std links it, and libdl where glibc has one).
const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;
extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

/// dlerror's message (the loader's last on this thread), or `otherwise`.
fn loader_error(otherwise: &str) -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string of this thread.
    let message = unsafe { dlerror() };
    if message.is_null() {
        otherwise.to_string()
    } else {
        // SAFETY: non-NULL, NUL-terminated.
        unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
    }
}

/// # Safety
/// `handle` is a handle dlopen returned.
unsafe fn symbol(handle: *mut c_void, name: &'static str) -> std::result::Result<*mut c_void, String> {
    let _ = dlerror(); // clear an older message
    let address = dlsym(handle, name.as_ptr() as *const c_char);
    if address.is_null() {
        let name = name.trim_end_matches('\0');
        return Err(format!("no {name} in it ({}): not the C API this crate declares", loader_error("NULL")));
    }
    Ok(address)
}

/// A copy of the library already in the process (a program linked with it, Python's), so
/// that the process keeps one; else the one built against; else the SONAME through the
/// loader's search (LD_LIBRARY_PATH, the system's folders), for a program moved to
/// another machine.
fn open_library() -> std::result::Result<(*mut c_void, String), String> {
    let mut tried = Vec::new();
    for (path, flags) in [(SONAME, RTLD_NOW | RTLD_NOLOAD), (LIBRARY, RTLD_NOW), (SONAME, RTLD_NOW)] {
        let name = CString::new(path).map_err(|_| format!("{path:?} holds a NUL"))?;
        // SAFETY: a NUL-terminated name; RTLD_NOW binds all of the library's symbols now.
        let handle = unsafe { dlopen(name.as_ptr(), flags) };
        if !handle.is_null() {
            return Ok((handle, path.to_string()));
        }
        if flags & RTLD_NOLOAD == 0 {
            tried.push(loader_error(path));
        } else {
            let _ = loader_error(""); // not loaded yet: no failure
        }
    }
    Err(tried.join("; "))
}

/// What a function returns while the library cannot be loaded: `reason` says why.
trait Unloaded {
    fn unloaded(reason: &'static CStr) -> Self;
}
impl Unloaded for commuxResult_t {
    fn unloaded(_: &'static CStr) -> Self {
        SYSTEM_ERROR
    }
}
impl Unloaded for *const c_char {
    /// commuxGetErrorString and commuxGetLastError: the reason.
    fn unloaded(reason: &'static CStr) -> Self {
        reason.as_ptr()
    }
}

static API: OnceLock<std::result::Result<Api, CString>> = OnceLock::new();

/// The library's functions, loaded and resolved at the first call; the reason otherwise.
fn api() -> std::result::Result<&'static Api, &'static CStr> {
    let loaded = API.get_or_init(|| {
        open_library()
            .and_then(|(handle, path)| {
                // SAFETY: a live handle, never closed.
                unsafe { Api::resolve(handle) }.map_err(|e| format!("{path}: {e}"))
            })
            .map_err(|e| {
                let message = format!("commux: cannot load libcommux_core (built against {LIBRARY}): {e}");
                CString::new(message.replace('\0', " ")).unwrap_or_default()
            })
    });
    match loaded {
        Ok(api) => Ok(api),
        Err(reason) => Err(reason.as_c_str()),
    }
}

/// Loads libcommux_core now (the first call of any function does it otherwise): Ok, or
/// [`SYSTEM_ERROR`] with why it cannot be loaded.
pub fn load() -> crate::Result<()> {
    match api() {
        Ok(_) => Ok(()),
        Err(reason) => Err(crate::Error::new(SYSTEM_ERROR, reason.to_string_lossy().into_owned())),
    }
}

/// Declares the C functions: each becomes a field of [`Api`], a function pointer resolved
/// once, and a function of this module of the same name and signature that calls it.
macro_rules! c_api {
    ($( pub fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty; )*) => {
        /// Every function of the C API, resolved in the loaded library.
        #[allow(non_snake_case)]
        struct Api {
            $( $name: unsafe extern "C" fn($($ty),*) -> $ret, )*
        }

        impl Api {
            /// # Safety
            /// `handle` is a live handle of libcommux_core.
            unsafe fn resolve(handle: *mut c_void) -> std::result::Result<Api, String> {
                Ok(Api {
                    $( $name: {
                        let address = symbol(handle, concat!(stringify!($name), "\0"))?;
                        // SAFETY: the library's function of this name has this C signature
                        // (commux.h).
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> $ret>(address)
                    }, )*
                })
            }
        }

        $(
            /// The C API's function of this name (include/commux/commux.h).
            ///
            /// # Safety
            /// As the C function's contract: valid pointers and handles.
            #[allow(non_snake_case, clippy::too_many_arguments)]
            #[inline]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                match api() {
                    Ok(api) => (api.$name)($($arg),*),
                    Err(reason) => <$ret as Unloaded>::unloaded(reason),
                }
            }
        )*
    };
}

c_api! {
    pub fn commuxGetErrorString(result: commuxResult_t) -> *const c_char;
    pub fn commuxGetLastError(comm: commuxComm_t) -> *const c_char;
    pub fn commuxGetVersion(version: *mut c_int) -> commuxResult_t;

    pub fn commuxGetUniqueId(id: *mut commuxUniqueId) -> commuxResult_t;
    pub fn commuxCommInitRank(
        comm: *mut commuxComm_t,
        nranks: c_int,
        id: commuxUniqueId,
        rank: c_int,
    ) -> commuxResult_t;
    pub fn commuxCommInitFromEnv(comm: *mut commuxComm_t) -> commuxResult_t;
    pub fn commuxCommFinalize(comm: commuxComm_t) -> commuxResult_t;
    pub fn commuxCommShrink(
        comm: commuxComm_t,
        exclude_ranks: *const c_int,
        exclude_count: c_int,
        flags: c_int,
        newcomm: *mut commuxComm_t,
    ) -> commuxResult_t;
    pub fn commuxCommDestroy(comm: commuxComm_t) -> commuxResult_t;
    pub fn commuxCommAbort(comm: commuxComm_t) -> commuxResult_t;
    pub fn commuxCommCount(comm: commuxComm_t, count: *mut c_int) -> commuxResult_t;
    pub fn commuxCommUserRank(comm: commuxComm_t, rank: *mut c_int) -> commuxResult_t;
    pub fn commuxCommSetTimeout(comm: commuxComm_t, milliseconds: i64) -> commuxResult_t;
    pub fn commuxCommGetAsyncError(
        comm: commuxComm_t,
        async_error: *mut commuxResult_t,
    ) -> commuxResult_t;

    pub fn commuxSend(
        buf: *const c_void,
        count: usize,
        datatype: commuxDataType_t,
        peer: c_int,
        tag: c_int,
        comm: commuxComm_t,
        stream: *mut c_void,
    ) -> commuxResult_t;
    pub fn commuxRecv(
        buf: *mut c_void,
        count: usize,
        datatype: commuxDataType_t,
        peer: c_int,
        tag: c_int,
        comm: commuxComm_t,
        stream: *mut c_void,
        status: *mut commuxStatus,
    ) -> commuxResult_t;
    pub fn commuxIsend(
        buf: *const c_void,
        count: usize,
        datatype: commuxDataType_t,
        peer: c_int,
        tag: c_int,
        comm: commuxComm_t,
        stream: *mut c_void,
        request: *mut commuxRequest_t,
    ) -> commuxResult_t;
    pub fn commuxIrecv(
        buf: *mut c_void,
        count: usize,
        datatype: commuxDataType_t,
        peer: c_int,
        tag: c_int,
        comm: commuxComm_t,
        stream: *mut c_void,
        request: *mut commuxRequest_t,
    ) -> commuxResult_t;
    pub fn commuxTest(request: commuxRequest_t, done: *mut c_int, status: *mut commuxStatus)
        -> commuxResult_t;
    pub fn commuxWait(request: commuxRequest_t, status: *mut commuxStatus) -> commuxResult_t;
    pub fn commuxRequestFree(request: commuxRequest_t) -> commuxResult_t;

    pub fn commuxGroupStart() -> commuxResult_t;
    pub fn commuxGroupEnd() -> commuxResult_t;

    pub fn commuxCommRegister(
        comm: commuxComm_t,
        buff: *mut c_void,
        size: usize,
        handle: *mut *mut c_void,
    ) -> commuxResult_t;
    pub fn commuxCommDeregister(comm: commuxComm_t, handle: *mut c_void) -> commuxResult_t;
    pub fn commuxMemAlloc(ptr: *mut *mut c_void, size: usize) -> commuxResult_t;
    pub fn commuxMemFree(ptr: *mut c_void) -> commuxResult_t;

    pub fn commuxAllReduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        datatype: commuxDataType_t,
        op: commuxRedOp_t,
        comm: commuxComm_t,
        stream: *mut c_void,
    ) -> commuxResult_t;
    pub fn commuxReduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        datatype: commuxDataType_t,
        op: commuxRedOp_t,
        root: c_int,
        comm: commuxComm_t,
        stream: *mut c_void,
    ) -> commuxResult_t;
    pub fn commuxBroadcast(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        datatype: commuxDataType_t,
        root: c_int,
        comm: commuxComm_t,
        stream: *mut c_void,
    ) -> commuxResult_t;
    pub fn commuxAllGather(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        sendcount: usize,
        datatype: commuxDataType_t,
        comm: commuxComm_t,
        stream: *mut c_void,
    ) -> commuxResult_t;
    pub fn commuxReduceScatter(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: usize,
        datatype: commuxDataType_t,
        op: commuxRedOp_t,
        comm: commuxComm_t,
        stream: *mut c_void,
    ) -> commuxResult_t;
    pub fn commuxAllToAll(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: usize,
        datatype: commuxDataType_t,
        comm: commuxComm_t,
        stream: *mut c_void,
    ) -> commuxResult_t;
    pub fn commuxBarrier(comm: commuxComm_t, stream: *mut c_void) -> commuxResult_t;
}
