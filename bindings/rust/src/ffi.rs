//! The C API of include/commux/commux.h, declared for Rust. Enums travel as `c_int`
//! constants: a value the library does not know must never become a Rust enum.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

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

extern "C" {
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
