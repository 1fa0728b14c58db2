//! commux used from a dependent crate, run with nothing set: no LD_LIBRARY_PATH, no run
//! path of this crate's own. The test starts 2 ranks as copies of this binary, which meet
//! through a unique id this process makes (its bootstrap store serves them), and each runs
//! a collective, a ring of messages, a barrier and the orderly end.
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use commux::{CommBackend, CommuxBackend, DataType, Recipe, UniqueId};
use commux_rust_consumer::{pass_around, sum_over_ranks};

const ID: &str = "COMMUX_CONSUMER_TEST_ID";
const RANK: &str = "COMMUX_CONSUMER_TEST_RANK";
const SIZE: usize = 2;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> [u8; commux::ffi::UNIQUE_ID_BYTES] {
    let mut out = [0u8; commux::ffi::UNIQUE_ID_BYTES];
    assert_eq!(text.len(), 2 * out.len(), "a unique id of another size");
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// The folder of the library this process loaded must not be on LD_LIBRARY_PATH: the point
/// of this test.
fn assert_not_on_library_path(library: &str) {
    let dir = std::fs::canonicalize(std::path::Path::new(library).parent().unwrap()).unwrap();
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        for path in std::env::split_paths(&paths) {
            let same = std::fs::canonicalize(&path).map(|p| p == dir).unwrap_or(false);
            assert!(!same, "LD_LIBRARY_PATH holds the library's folder {}: the test proves nothing", dir.display());
        }
    }
}

/// Where this process has libcommux_core mapped from (/proc/self/maps).
fn mapped_library() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("libcommux_core"))
        .map(str::to_string)
}

fn rank_main(rank: usize, id: UniqueId) {
    let backend = CommuxBackend::new(Recipe::Id { id, rank, size: SIZE }, DataType::Float32, 60_000)
        .unwrap_or_else(|e| panic!("rank {rank}: init: {e}"));
    assert_eq!((backend.rank(), backend.world_size()), (rank, SIZE));
    assert!(backend.is_healthy());

    let mut values: Vec<f32> = (0..1000).map(|i| (rank * 1000 + i) as f32).collect();
    sum_over_ranks(&backend, &mut values).unwrap();
    for (i, v) in values.iter().enumerate() {
        let want: f32 = (0..SIZE).map(|r| (r * 1000 + i) as f32).sum();
        assert_eq!(*v, want, "rank {rank}: element {i}");
    }
    let before = (rank + SIZE - 1) % SIZE;
    assert_eq!(pass_around(&backend, 0xC0DE_0000 + rank as u64).unwrap(), 0xC0DE_0000 + before as u64);
    backend.barrier().unwrap();
    assert!(backend.is_healthy());
    backend.finalize().unwrap();
    let mapped = mapped_library().expect("libcommux_core is not mapped");
    assert_not_on_library_path(&mapped);
    println!("rank {rank}: libcommux_core from {mapped}");
}

#[test]
fn two_ranks_from_a_dependent_crate_with_nothing_set() {
    if let Ok(rank) = std::env::var(RANK) {
        let id = UniqueId::from_bytes(&unhex(&std::env::var(ID).unwrap()));
        return rank_main(rank.parse().unwrap(), id);
    }
    // The library's own calls, in this process: its version, and a unique id (this
    // process's bootstrap store serves the ranks).
    let mut version = 0;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { commux::ffi::commuxGetVersion(&mut version) }, commux::ffi::SUCCESS);
    assert!(version >= 100, "version {version}");
    let id = UniqueId::new().unwrap();
    let mapped = mapped_library().expect("libcommux_core is not mapped after a call");
    assert_not_on_library_path(&mapped);
    println!("libcommux_core {version} from {mapped}");

    let me = std::env::current_exe().unwrap();
    let mut ranks: Vec<Option<Child>> = (0..SIZE)
        .map(|rank| {
            Some(
                Command::new(&me)
                    .args(["two_ranks_from_a_dependent_crate_with_nothing_set", "--exact", "--nocapture", "--test-threads=1"])
                    .env(RANK, rank.to_string())
                    .env(ID, hex(&id.to_bytes()))
                    .spawn()
                    .expect("cannot start a rank"),
            )
        })
        .collect();
    let start = Instant::now();
    let mut failures = Vec::new();
    while ranks.iter().any(Option::is_some) {
        for (rank, slot) in ranks.iter_mut().enumerate() {
            if let Some(status) = slot.as_mut().and_then(|c| c.try_wait().unwrap()) {
                *slot = None;
                if !status.success() {
                    failures.push(format!("rank {rank}: {status}"));
                }
            }
        }
        if start.elapsed() > Duration::from_secs(120) {
            for child in ranks.iter_mut().flatten() {
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!("ranks still running after 120 s (killed); failures: {failures:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(failures.is_empty(), "{failures:?}");
}
