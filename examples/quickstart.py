import torch, torch.distributed as dist
import commux; commux.register()            # registers "ucx" and "commux"

dist.init_process_group(backend="ucx")      # env://, tcp://, file:// or store= all work
rank, world = dist.get_rank(), dist.get_world_size()
right, left = (rank + 1) % world, (rank - 1) % world

# Two messages to the right neighbour, tags 7 and 3. The receives from the left
# neighbour are posted in the opposite order: each one is matched by (sender, tag).
s7 = dist.isend(torch.full((4,), 100.0 * rank + 7), dst=right, tag=7)
s3 = dist.isend(torch.full((4,), 100.0 * rank + 3), dst=right, tag=3)
got3, got7 = torch.empty(4), torch.empty(4)
r3 = dist.irecv(got3, src=left, tag=3)
r7 = dist.irecv(got7, src=left, tag=7)
for work in (s7, s3, r3, r7):
    work.wait()
matched = bool((got7 == 100 * left + 7).all() and (got3 == 100 * left + 3).all())

t = torch.tensor([float(rank), float(matched)])
dist.all_reduce(t)                          # SUM; also AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR
ok = t[0] == world * (world - 1) // 2 and t[1] == world
if rank == 0:
    print(f"{int(t[1])} of {world} ranks got tag 7 and tag 3 from their left neighbour in the "
          f"right buffers (receives posted in swapped order); all_reduce: sum of the ranks "
          f"{int(t[0])}, expected {world * (world - 1) // 2}: {'OK' if ok else 'FAILED'}")
dist.destroy_process_group()
raise SystemExit(0 if ok else 1)
