//! A dependent crate's own code over commux's `CommBackend`: what an engine's model code
//! does with it.
use commux::{CommBackend, Result};

/// The sum over ranks of each rank's `values`, in place (f32 elements: the backend must add
/// Float32).
pub fn sum_over_ranks(backend: &dyn CommBackend, values: &mut [f32]) -> Result<()> {
    backend.all_reduce(values.as_mut_ptr() as usize as u64, std::mem::size_of_val(values))
}

/// Passes `token` around the ring of ranks: each rank sends its own to the next rank and
/// returns the one from the rank before.
pub fn pass_around(backend: &dyn CommBackend, token: u64) -> Result<u64> {
    let size = backend.world_size();
    let rank = backend.rank();
    let out = [token];
    let mut got = [0u64];
    backend.group_start()?;
    let posted = backend
        .send_to(out.as_ptr() as usize as u64, 8, (rank + 1) % size, 0)
        .and_then(|_| backend.recv_from(got.as_mut_ptr() as usize as u64, 8, (rank + size - 1) % size, 0));
    let ended = backend.group_end(); // closed even when a post failed
    posted.and(ended)?;
    Ok(got[0])
}
