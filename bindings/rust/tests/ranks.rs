//! Real ranks: each test starts its ranks as copies of this test binary (running only that
//! test, with COMMUX_RANK/COMMUX_SIZE/COMMUX_BOOTSTRAP set) and fails unless every rank
//! succeeds before its deadline; a rank that hangs is killed, it never blocks the run.
use std::process::{Child, Command, ExitStatus};
use std::thread::sleep;
use std::time::{Duration, Instant};

use commux::{CommBackend, CommuxBackend, DataType, Recipe};

const ROLE: &str = "COMMUX_RUST_TEST_RANK";
const RESTARTED: &str = "COMMUX_RUST_TEST_RESTARTED";

fn is_rank() -> bool {
    std::env::var(ROLE).is_ok()
}

fn spawn_rank(test: &str, rank: usize, size: usize, port: u16, restarted: bool) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, "1")
        .env("COMMUX_RANK", rank.to_string())
        .env("COMMUX_SIZE", size.to_string())
        .env("COMMUX_BOOTSTRAP", format!("127.0.0.1:{port}"))
        .env("COMMUX_BOOTSTRAP_SECRET", "rust-tests");
    if restarted {
        command.env(RESTARTED, "1");
    }
    command.spawn().expect("cannot start a rank")
}

/// Runs `size` ranks of `test`. `dies`: a rank that ends by a signal on purpose, started
/// again once when `restart` (the replacement must succeed).
/// A port for the bootstrap store, kept reserved while it lives: the socket stays bound
/// (SO_REUSEADDR, not listening), so the kernel hands the port to nobody else while rank 0's
/// store (SO_REUSEADDR too) listens on it. A port only free a moment ago can be taken in
/// between (the C test's once was, in CI).
struct ReservedPort {
    fd: i32,
    port: u16,
}

#[repr(C)]
struct SockaddrIn {
    family: u16,
    port: u16,
    addr: u32,
    zero: [u8; 8],
}

extern "C" {
    fn socket(domain: i32, kind: i32, protocol: i32) -> i32;
    fn setsockopt(fd: i32, level: i32, name: i32, value: *const i32, len: u32) -> i32;
    fn bind(fd: i32, addr: *const SockaddrIn, len: u32) -> i32;
    fn getsockname(fd: i32, addr: *mut SockaddrIn, len: *mut u32) -> i32;
    fn close(fd: i32) -> i32;
}

impl ReservedPort {
    fn new() -> Self {
        const AF_INET: i32 = 2;
        const SOCK_STREAM: i32 = 1;
        const SOCK_CLOEXEC: i32 = 0o2000000; // the ranks this test starts do not inherit it
        const SOL_SOCKET: i32 = 1;
        const SO_REUSEADDR: i32 = 2;
        let len = std::mem::size_of::<SockaddrIn>() as u32;
        let mut addr = SockaddrIn { family: AF_INET as u16, port: 0, addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(), zero: [0; 8] };
        // SAFETY: plain socket calls on a socket this function owns, with valid pointers.
        unsafe {
            let fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket() failed");
            let one = 1i32;
            let mut got = len;
            assert!(
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, 4) == 0
                    && bind(fd, &addr, len) == 0
                    && getsockname(fd, &mut addr, &mut got) == 0,
                "cannot reserve a port"
            );
            ReservedPort { fd, port: u16::from_be(addr.port) }
        }
    }
}

impl Drop for ReservedPort {
    fn drop(&mut self) {
        // SAFETY: the socket this value owns.
        unsafe {
            close(self.fd);
        }
    }
}

fn run_job(test: &str, size: usize, deadline: Duration, dies: Option<usize>, restart: bool) {
    let reserved = ReservedPort::new();
    let port = reserved.port;
    let mut children: Vec<Option<Child>> =
        (0..size).map(|r| Some(spawn_rank(test, r, size, port, false))).collect();
    let start = Instant::now();
    let mut restarted = false;
    let mut failures = Vec::new();
    while children.iter().any(Option::is_some) {
        for rank in 0..size {
            let status = match children[rank].as_mut().map(|c| c.try_wait().unwrap()) {
                Some(Some(status)) => status,
                _ => continue,
            };
            children[rank] = None;
            let died_on_purpose = dies == Some(rank) && !restarted && !status.success();
            if died_on_purpose {
                if restart {
                    restarted = true;
                    children[rank] = Some(spawn_rank(test, rank, size, port, true));
                }
                continue;
            }
            if !status.success() {
                failures.push(format!("rank {rank}: {}", describe(status)));
            }
        }
        if start.elapsed() > deadline {
            for child in children.iter_mut().flatten() {
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!("{test}: ranks still running after {deadline:?} (killed); failures: {failures:?}");
        }
        sleep(Duration::from_millis(10));
    }
    assert!(failures.is_empty(), "{test}: {failures:?}");
    if dies.is_some() && restart {
        assert!(restarted, "{test}: the rank meant to die did not");
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (_, Some(signal)) => format!("signal {signal}"),
        _ => "?".into(),
    }
}

fn backend(dtype: DataType) -> CommuxBackend {
    CommuxBackend::new(Recipe::Environment, dtype, 60_000).expect("init")
}

fn bf16(x: f32) -> u16 {
    (x.to_bits() >> 16) as u16
}
fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}
fn value_of(rank: usize, i: usize) -> f32 {
    ((rank * 7 + i * 3) % 11 + 1) as f32
}
fn addr<T>(v: &[T]) -> u64 {
    v.as_ptr() as usize as u64
}
fn addr_mut<T>(v: &mut [T]) -> u64 {
    v.as_mut_ptr() as usize as u64
}

// --- every method at 3 ranks -------------------------------------------------------------

fn every_method() {
    let b = backend(DataType::Bfloat16);
    let (rank, size) = (b.rank(), b.world_size());
    assert_eq!(rank, std::env::var("COMMUX_RANK").unwrap().parse::<usize>().unwrap());
    assert_eq!(size, std::env::var("COMMUX_SIZE").unwrap().parse::<usize>().unwrap());
    assert!(b.is_healthy());

    // all_reduce: BF16 sums of known patterns (small integers, exact in BF16).
    let n = 4099;
    let mut v: Vec<u16> = (0..n).map(|i| bf16(value_of(rank, i))).collect();
    b.all_reduce(addr_mut(&mut v), n * 2).unwrap();
    for (i, x) in v.iter().enumerate() {
        let want: f32 = (0..size).map(|r| value_of(r, i)).sum();
        assert_eq!(from_bf16(*x), want, "all_reduce element {i}");
    }
    let mut w: Vec<u16> = (0..n).map(|i| bf16(value_of(rank, i))).collect();
    b.all_reduce_async(addr_mut(&mut w), n * 2, 0).unwrap();
    assert_eq!(v, w, "all_reduce_async differs from all_reduce");
    // A stream with host memory: refused as host memory by a library with the CUDA device
    // path, as a stream by one without.
    let refused = b.all_reduce_async(addr_mut(&mut w), n * 2, 0x1234).unwrap_err();
    assert!(
        (refused.code == commux::ffi::INVALID_ARGUMENT && refused.message.contains("is host memory"))
            || (refused.code == commux::ffi::UNSUPPORTED && refused.message.contains("stream")),
        "all_reduce_async on a stream with host memory: {refused}"
    );
    assert_eq!(b.all_reduce(addr_mut(&mut w), 3).unwrap_err().code, commux::ffi::INVALID_ARGUMENT);

    // all_gather: every rank's block, in rank order.
    let block = 777;
    let send: Vec<u8> = (0..block).map(|i| (rank * 31 + i) as u8).collect();
    let mut recv = vec![0u8; block * size];
    b.all_gather(addr(&send), addr_mut(&mut recv), block).unwrap();
    for r in 0..size {
        for i in 0..block {
            assert_eq!(recv[r * block + i], (r * 31 + i) as u8, "all_gather block {r} byte {i}");
        }
    }

    // reduce_scatter: this rank's block of the BF16 sum.
    let k = 513;
    let send: Vec<u16> = (0..k * size).map(|i| bf16(value_of(rank, i))).collect();
    let mut mine = vec![0u16; k];
    b.reduce_scatter(addr(&send), addr_mut(&mut mine), k * 2).unwrap();
    for i in 0..k {
        let want: f32 = (0..size).map(|r| value_of(r, rank * k + i)).sum();
        assert_eq!(from_bf16(mine[i]), want, "reduce_scatter element {i}");
    }

    // broadcast from every root.
    for root in 0..size {
        let mut buf: Vec<u8> = if rank == root { (0..1000).map(|i| (root + i) as u8).collect() } else { vec![0; 1000] };
        b.broadcast(addr_mut(&mut buf), 1000, root).unwrap();
        assert!(buf.iter().enumerate().all(|(i, x)| *x == (root + i) as u8), "broadcast from {root}");
    }
    assert_eq!(b.broadcast(addr_mut(&mut recv), 4, size).unwrap_err().code, commux::ffi::INVALID_ARGUMENT);
    b.barrier().unwrap();

    // send_to / recv_from inside a group: every rank sends 2 MiB first, then receives. Without
    // the batching, each blocking send would wait for a receive nobody has posted yet.
    let big = 2 << 20;
    let out: Vec<u8> = (0..big).map(|i| (rank + i) as u8).collect();
    let mut inbox = vec![0u8; big];
    let (next, before) = ((rank + 1) % size, (rank + size - 1) % size);
    b.group_start().unwrap();
    b.send_to(addr(&out), big, next, 0).unwrap();
    b.recv_from(addr_mut(&mut inbox), big, before, 0).unwrap();
    b.group_end().unwrap();
    assert!(inbox.iter().enumerate().all(|(i, x)| *x == (before + i) as u8), "ring from {before}");
    // Order per peer: three messages arrive as sent.
    if rank == 0 {
        for k in 0u32..3 {
            b.send_to(addr(&[k]), 4, 1, 0).unwrap();
        }
    } else if rank == 1 {
        for k in 0u32..3 {
            let mut got = [u32::MAX];
            b.recv_from(addr_mut(&mut got), 4, 0, 0).unwrap();
            assert_eq!(got[0], k, "message order");
        }
    }
    let refused = b.send_to(addr(&out), 8, next, 0xabc).unwrap_err();
    assert!(
        refused.code == commux::ffi::INVALID_ARGUMENT || refused.code == commux::ffi::UNSUPPORTED,
        "send_to on a stream with host memory: {refused}"
    );

    // register_buffer: a registered buffer used by all_reduce.
    let mut reg: Vec<u16> = (0..n).map(|_| bf16((rank + 1) as f32)).collect();
    let handle = b.register_buffer(addr_mut(&mut reg), n * 2).unwrap();
    assert_ne!(handle, 0);
    b.all_reduce(addr_mut(&mut reg), n * 2).unwrap();
    let sum = (size * (size + 1) / 2) as f32;
    assert!(reg.iter().all(|x| from_bf16(*x) == sum), "all_reduce in a registered buffer");
    b.deregister_buffer(handle).unwrap();
    assert_eq!(b.deregister_buffer(handle).unwrap_err().code, commux::ffi::INVALID_ARGUMENT);

    // symmetric_alloc: the memory serves as all_gather's output.
    let bytes = block * size;
    let sym = b.symmetric_alloc(bytes).unwrap();
    assert_ne!(sym, 0);
    let send: Vec<u8> = (0..block).map(|i| (rank * 31 + i) as u8).collect();
    b.all_gather(addr(&send), sym, block).unwrap();
    // SAFETY: `bytes` bytes at `sym`, just allocated and written by all_gather.
    let view = unsafe { std::slice::from_raw_parts(sym as usize as *const u8, bytes) };
    assert_eq!(view, &recv[..], "all_gather into symmetric memory");
    b.symmetric_free(sym).unwrap();
    assert_eq!(b.symmetric_free(sym).unwrap_err().code, commux::ffi::INVALID_ARGUMENT);

    b.set_add_kernel(0x4000); // commux folds itself; accepted and unused

    // recv_command_u32: the root broadcasts a command word, the others wait for it.
    let mut word = [if rank == 0 { 0xC0FFEEu32 } else { 0 }];
    if rank == 0 {
        assert_eq!(b.recv_command_u32(addr_mut(&mut word), 0).unwrap_err().code, commux::ffi::INVALID_ARGUMENT);
        b.broadcast(addr_mut(&mut word), 4, 0).unwrap();
    } else {
        b.recv_command_u32(addr_mut(&mut word), 0).unwrap();
    }
    assert_eq!(word[0], 0xC0FFEE);
    b.barrier().unwrap();
    assert!(b.is_healthy());
    b.finalize().unwrap();
}

#[test]
fn every_method_at_3_ranks() {
    if is_rank() {
        return every_method();
    }
    run_job("every_method_at_3_ranks", 3, Duration::from_secs(120), None, false);
}

#[test]
fn every_method_at_2_ranks() {
    if is_rank() {
        return every_method();
    }
    run_job("every_method_at_2_ranks", 2, Duration::from_secs(120), None, false);
}

// --- recv_command_u32 sleeps through idle time ------------------------------------------

/// This process's CPU time (user + system, all threads) from /proc/self/stat, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0 // USER_HZ
}

fn idle_seconds() -> u64 {
    std::env::var("COMMUX_TEST_IDLE_S").ok().and_then(|s| s.parse().ok()).unwrap_or(4)
}

#[test]
fn recv_command_waits_idle_without_spinning() {
    if !is_rank() {
        let deadline = Duration::from_secs(idle_seconds() + 90);
        return run_job("recv_command_waits_idle_without_spinning", 2, deadline, None, false);
    }
    let b = backend(DataType::Bfloat16);
    b.barrier().unwrap();
    let mut word = [0u32];
    if b.rank() == 0 {
        sleep(Duration::from_secs(idle_seconds()));
        word[0] = 7;
        b.broadcast(addr_mut(&mut word), 4, 0).unwrap();
    } else {
        let (wall, cpu) = (Instant::now(), cpu_seconds());
        b.recv_command_u32(addr_mut(&mut word), 0).unwrap();
        let (wall, cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
        assert_eq!(word[0], 7);
        assert!(wall >= idle_seconds() as f64 * 0.9, "returned after {wall:.1} s");
        // A spinning wait burns a core: 1.0 of the wall time.
        assert!(cpu < 0.1 * wall, "waited {wall:.1} s and used {cpu:.2} s of CPU");
        println!("recv_command_u32: waited {wall:.1} s, {cpu:.2} s of CPU");
    }
    b.finalize().unwrap();
}

#[test]
fn recv_command_fails_soon_after_the_root_dies() {
    if !is_rank() {
        return run_job("recv_command_fails_soon_after_the_root_dies", 2, Duration::from_secs(90), Some(0), false);
    }
    let b = backend(DataType::Bfloat16);
    b.barrier().unwrap();
    if b.rank() == 0 {
        sleep(Duration::from_millis(500));
        die();
    }
    let start = Instant::now();
    let mut word = [0u32];
    let error = b.recv_command_u32(addr_mut(&mut word), 0).unwrap_err();
    let took = start.elapsed();
    assert_eq!(error.code, commux::ffi::REMOTE_ERROR, "{error}");
    assert!(took < Duration::from_secs(15), "the root's death took {took:?} to end the wait");
    assert!(!b.is_healthy());
    println!("recv_command_u32 failed {took:?} after it began: {error}");
}

extern "C" {
    fn kill(pid: i32, signal: i32) -> i32;
}

/// Ends this process by SIGKILL, as an outside kill would.
fn die() -> ! {
    // SAFETY: signals this process only.
    unsafe {
        kill(std::process::id() as i32, 9);
    }
    unreachable!("SIGKILL returned");
}

// --- attempt_reconnect after a peer was killed and started again ------------------------

#[test]
fn attempt_reconnect_after_a_peer_is_killed_and_restarted() {
    if !is_rank() {
        return run_job("attempt_reconnect_after_a_peer_is_killed_and_restarted", 3, Duration::from_secs(120), Some(2), true);
    }
    let b = backend(DataType::Float32);
    let (rank, size) = (b.rank(), b.world_size());
    if std::env::var(RESTARTED).is_err() {
        let mut one = [1.0f32];
        b.all_reduce(addr_mut(&mut one), 4).unwrap();
        assert_eq!(one[0], size as f32);
        b.barrier().unwrap();
        if rank == 2 {
            die();
        }
        let start = Instant::now();
        while b.is_healthy() {
            assert!(start.elapsed() < Duration::from_secs(30), "rank 2's death not seen in 30 s");
            sleep(Duration::from_millis(10));
        }
        let mut x = [1.0f32];
        assert!(b.all_reduce(addr_mut(&mut x), 4).is_err(), "a collective with a dead member succeeded");
        b.attempt_reconnect().unwrap();
        assert!(b.is_healthy());
    }
    // Survivors and the new process together, on the rebuilt communicator.
    let mut v = [(rank + 1) as f32; 1000];
    b.all_reduce(addr_mut(&mut v), 4000).unwrap();
    assert!(v.iter().all(|x| *x == (size * (size + 1) / 2) as f32), "after the rebuild: {}", v[0]);
    b.finalize().unwrap();
}

// --- shrink: the survivors go on without the dead rank -----------------------------------

#[test]
fn shrink_lets_the_survivors_go_on_without_a_killed_rank() {
    if !is_rank() {
        return run_job("shrink_lets_the_survivors_go_on_without_a_killed_rank", 4, Duration::from_secs(120), Some(1), false);
    }
    let b = backend(DataType::Float32);
    let (rank, size) = (b.rank(), b.world_size());
    let mut one = [1.0f32];
    b.all_reduce(addr_mut(&mut one), 4).unwrap();
    assert_eq!(one[0], size as f32);
    b.barrier().unwrap();
    if rank == 1 {
        die();
    }
    let start = Instant::now();
    while b.is_healthy() {
        assert!(start.elapsed() < Duration::from_secs(30), "rank 1's death not seen in 30 s");
        sleep(Duration::from_millis(10));
    }
    // Wrong requests are refused, and the old backend stays refused.
    assert_eq!(b.shrink(&[size]).err().map(|e| e.code), Some(commux::ffi::INVALID_ARGUMENT));
    assert_eq!(b.shrink(&[rank]).err().map(|e| e.code), Some(commux::ffi::INVALID_ARGUMENT));
    let survivors = b.shrink(&[1]).unwrap();
    let mut x = [1.0f32];
    assert!(b.all_reduce(addr_mut(&mut x), 4).is_err(), "the old backend took a collective");
    // Ranks 0, 2, 3 are 0, 1, 2 now.
    let expected_rank = if rank == 0 { 0 } else { rank - 1 };
    assert_eq!((survivors.rank(), survivors.world_size()), (expected_rank, size - 1));
    assert!(survivors.is_healthy());
    let mut v = [(rank + 1) as f32; 1000];
    survivors.all_reduce(addr_mut(&mut v), 4000).unwrap();
    let sum = (1..=size).sum::<usize>() - 2; // every old rank + 1, but rank 1's
    assert!(v.iter().all(|x| *x == sum as f32), "survivors' all_reduce: {}", v[0]);
    // Messages between survivors, by their new ranks.
    let me = survivors.rank();
    let n = survivors.world_size();
    let out = [me as f32 * 10.0; 8];
    let mut inbox = [0.0f32; 8];
    survivors.group_start().unwrap();
    survivors.send_to(addr(&out), 32, (me + 1) % n, 0).unwrap();
    survivors.recv_from(addr_mut(&mut inbox), 32, (me + n - 1) % n, 0).unwrap();
    survivors.group_end().unwrap();
    assert!(inbox.iter().all(|x| *x == ((me + n - 1) % n) as f32 * 10.0), "{inbox:?}");
    assert!(survivors.attempt_reconnect().is_err(), "a survivors' backend rebuilt from a recipe");
    survivors.finalize().unwrap();
}

// --- a completion timeout makes the backend unhealthy until attempt_reconnect ------------

/// A file both ranks of one job see (their parent's pid and the job's bootstrap port name
/// it): rank 0 makes it once its receive has timed out, so that rank 1 rebuilds only then
/// (its abort might otherwise end rank 0's wait with another error first).
fn timed_out_marker() -> std::path::PathBuf {
    let bootstrap = std::env::var("COMMUX_BOOTSTRAP").unwrap();
    let port = bootstrap.rsplit(':').next().unwrap();
    let parent = std::os::unix::process::parent_id();
    std::env::temp_dir().join(format!("commux-rust-test-{parent}-{port}-timed-out"))
}

#[test]
fn a_receive_timeout_makes_it_unhealthy_until_attempt_reconnect() {
    if !is_rank() {
        return run_job("a_receive_timeout_makes_it_unhealthy_until_attempt_reconnect", 2, Duration::from_secs(120), None, false);
    }
    const TIMEOUT_MS: i64 = 2_000;
    let b = CommuxBackend::new(Recipe::Environment, DataType::Float32, TIMEOUT_MS).expect("init");
    let rank = b.rank();
    // Connected and in step: a collective first.
    let mut one = [1.0f32];
    b.all_reduce(addr_mut(&mut one), 4).unwrap();
    assert_eq!(one[0], 2.0);
    assert!(b.is_healthy());
    let marker = timed_out_marker();
    if rank == 0 {
        // Rank 1 sends nothing: the receive runs out its time.
        let mut inbox = [0u8; 16];
        let start = Instant::now();
        let error = b.recv_from(addr_mut(&mut inbox), 16, 1, 0).unwrap_err();
        let took = start.elapsed();
        assert!(error.is_timeout(), "recv_from without a sender: {error}");
        assert!(took >= Duration::from_millis(TIMEOUT_MS as u64 * 9 / 10), "timed out after {took:?}");
        assert!(!b.is_healthy(), "healthy after a receive timed out: {error}");
        // It stays so: a refused call or time passing does not make it healthy.
        assert!(b.all_reduce(addr_mut(&mut one), 3).is_err());
        sleep(Duration::from_millis(100));
        assert!(!b.is_healthy(), "healthy again without attempt_reconnect");
        std::fs::write(&marker, b"timed out").unwrap();
    } else {
        let start = Instant::now();
        while !marker.exists() {
            assert!(start.elapsed() < Duration::from_secs(60), "rank 0's receive never timed out");
            assert!(b.is_healthy(), "rank 0 failed before its receive timed out");
            sleep(Duration::from_millis(10));
        }
        assert!(b.is_healthy(), "rank 1 did nothing that failed");
    }
    b.attempt_reconnect().unwrap();
    assert!(b.is_healthy(), "unhealthy after attempt_reconnect");
    if rank == 1 {
        let _ = std::fs::remove_file(&marker);
    }
    // The rebuilt communicator works: a collective and a message.
    let mut v = [(rank + 1) as f32; 100];
    b.all_reduce(addr_mut(&mut v), 400).unwrap();
    assert!(v.iter().all(|x| *x == 3.0), "after the rebuild: {}", v[0]);
    let mut word = [0u32];
    if rank == 1 {
        b.send_to(addr(&[0xFEEDu32]), 4, 0, 0).unwrap();
    } else {
        b.recv_from(addr_mut(&mut word), 4, 1, 0).unwrap();
        assert_eq!(word[0], 0xFEED);
    }
    assert!(b.is_healthy());
    b.finalize().unwrap();
}
