"""Neighbourhood exchanges for stencil codes: a Cartesian process grid and a persistent halo
exchange of the ghost cells kept inside each rank's tensor.

    grid = commux.halo.CartGrid(ndim=2, periodic=[True, False])     # dims chosen for the world
    ex = commux.halo.HaloExchange([temperature, concentration], widths=1, grid=grid)
    for step in range(steps):
        ex.exchange()            # or ex.start() ... compute the interior ... ex.wait()
        update(temperature, concentration)

The grid and every neighbour's direction number come from commux's core
(halo/cart_topology.hpp), so the C++ and Python sides agree. The ghost cells on side d take
the face their neighbour there sent in direction -d: a message lists its faces by the number
of the direction they travel in, and the receiver its ghost regions by the number of the
direction they come from, so periodic dimensions of size 1 (a rank is its own neighbour on
both sides) and 2 (one rank is both neighbours) keep their two directions apart.

One message goes to each neighbour rank per step, carrying every face and field that goes
to it. On a commux group with CPU tensors a step is one C++ call each for start() and wait()
(the core's exchange, halo/neighbour_exchange.hpp): the faces go as they lie (a UCX iov of
their rows) or, where they are many short pieces (a column of a row-major grid), packed
into a buffer the exchange keeps. Elsewhere (gloo, CUDA tensors) the steps are tagged
``isend``/``irecv`` of packed buffers from Python. What does not change between steps
(neighbours, face views, buffers) is set up once, and the ranks check once, at
construction, that their neighbours' tensors fit theirs. ``GraphExchange`` is the same for
a graph of ranks, and what ``HaloExchange`` runs on. An exchange uses the tags ``tag_base``
to ``tag_base + 3 * 3**ndim`` of its group.
"""

from __future__ import annotations

import socket
import zlib
from collections import namedtuple

import torch
import torch.distributed as dist

from . import load_extension

Neighbour = namedtuple("Neighbour", "offset rank direction opposite")

#: Default first tag of an exchange: far above the tags codes pick by hand.
DEFAULT_TAG_BASE = 1 << 30
#: A neighbour on another host: pack its messages when their pieces average fewer bytes
#: (over TCP packing won up to 1 KiB pieces, tied at 8 KiB, lost at 32 KiB).
REMOTE_PACK_BELOW = 4096
_ALIGN = 16  # bytes: each field's piece of a packed message starts aligned
#: The first word of a neighbour-check record from a rank that refused its own arguments
#: (a real record starts with its number of fields, at least 1).
_REFUSED = -1


class CartGrid:
    """A Cartesian process grid over ``group`` (default: the world), ranks in row-major
    order as ``MPI_Cart_create`` lays them out.

    ``dims``: a size per dimension, 0 to have it chosen (as ``MPI_Dims_create``); or None with
    ``ndim`` for a grid chosen whole. ``periodic``: one flag, or one per dimension.
    ``diagonals``: the neighbours across edges and corners too (3**n - 1 of them, for
    27-point stencils), not only the 2n faces.
    """

    def __init__(self, dims=None, periodic=False, diagonals=False, group=None, ndim=None):
        ext = load_extension()
        self.group = group
        size = dist.get_world_size(group)
        if dims is None:
            if ndim is None:
                raise ValueError("commux.halo.CartGrid: give dims or ndim")
            dims = [0] * int(ndim)
        dims = [int(d) for d in dims]
        self.dims = list(ext.dims_create(size, dims))
        if isinstance(periodic, bool):
            periodic = [periodic] * len(self.dims)
        self.periodic = [bool(p) for p in periodic]
        if len(self.periodic) != len(self.dims):
            raise ValueError(f"commux.halo.CartGrid: {len(self.periodic)} periodic flags for "
                             f"{len(self.dims)} dimensions")
        self.diagonals = bool(diagonals)
        self.rank = dist.get_rank(group)
        self.neighbours = [Neighbour(tuple(o), r, d, p) for o, r, d, p in ext.cart_neighbours(
            self.dims, self.periodic, self.diagonals, self.rank)]
        self.coords = self.coords_of(self.rank)

    @property
    def ndim(self) -> int:
        return len(self.dims)

    def coords_of(self, rank: int) -> tuple:
        """The grid coordinates of ``rank`` (row-major)."""
        out = []
        for d in reversed(self.dims):
            out.append(rank % d)
            rank //= d
        return tuple(reversed(out))

    def split(self, extent: int, dim: int) -> tuple[int, int]:
        """This rank's part ``(start, stop)`` of ``extent`` cells along grid dimension ``dim``,
        split as evenly as they go (the first ``extent % dims[dim]`` parts one cell longer)."""
        parts, at = self.dims[dim], self.coords[dim]
        base, extra = divmod(extent, parts)
        start = at * base + min(at, extra)
        return start, start + base + (1 if at < extra else 0)


def _box(shape, widths, offset, ghost):
    """The slices of the face towards ``offset``: the interior cells next to it (``ghost``
    False: what is sent) or the ghost cells beyond it (True: what is received). The core's
    (halo/face_runs.hpp), which also refuses a halo wider than the interior."""
    start, extent = load_extension().face_box(list(shape), list(widths), list(offset), ghost)
    return tuple(slice(s, s + e) for s, e in zip(start, extent))


def _packed(tensors):
    """One byte buffer for a message of `tensors`, and each one's piece of it (a view of
    its dtype and shape), every piece starting aligned."""
    sizes = [(t.numel() * t.element_size() + _ALIGN - 1) // _ALIGN * _ALIGN for t in tensors]
    buf = torch.empty(sum(sizes), dtype=torch.uint8, device=tensors[0].device)
    pieces, at = [], 0
    for t, size in zip(tensors, sizes):
        n = t.numel() * t.element_size()
        pieces.append(buf[at:at + n].view(t.dtype).view(t.shape))
        at += size
    return buf, pieces


class HaloExchange:
    """A persistent exchange of the ghost cells of ``fields`` (one tensor or a list of them,
    the same shape in the grid's dimensions) with the grid's neighbours: ``widths`` ghost
    cells (one number, or one per grid dimension) on both sides of each of the first
    ``grid.ndim`` dimensions, inside the tensors. Faces towards a non-periodic edge are
    left alone. One message per neighbour carries every field.

    Collective over the grid's group: every rank builds its exchange at the same point, and
    the ranks check their neighbours' fields against their own then (ValueError naming the
    neighbour and what differs, on both sides, before any ghost cell moves). A rank whose
    own arguments are refused (a halo wider than its interior) still takes part in that
    check, saying so: it raises its ValueError, and its neighbours one naming it, at once.
    """

    def __init__(self, fields, widths, grid: CartGrid, tag_base: int = DEFAULT_TAG_BASE,
                 pack_below=None):
        n = grid.ndim
        directions = 3 ** n
        # (Without tags of its own this rank cannot tell its neighbours anything.)
        if not 0 <= tag_base <= (1 << 31) - 1 - 3 * directions:
            raise ValueError(f"commux.halo.HaloExchange: tag_base {tag_base} leaves no room for "
                             f"its {3 * directions} tags below 2**31")
        self.grid, self.tag_base = grid, tag_base
        self._group = grid.group
        self._remote = set()  # neighbour ranks on other hosts (_check_neighbours finds them)
        try:
            fields, widths, shape = _halo_arguments(fields, widths, n)
            _check_pack_below(pack_below, "HaloExchange")
        except (ValueError, TypeError) as refused:
            # Its neighbours wait for it in the check: without this rank's word they would
            # wait there until the group's timeout and fail with a DistBackendError.
            try:
                self._check_neighbours(None, directions)
            except Exception:  # noqa: BLE001 (this rank's own error says more)
                pass
            raise refused
        self.fields, self.widths = fields, widths
        self._check_neighbours(shape, directions)

        # A graph exchange underneath: to each neighbour rank, the faces of every direction
        # that leads to it, in direction order; from it, the ghost cells of every direction
        # it lies in, in the order of the directions its messages travel (`opposite`), so
        # that item i of a message lands where it belongs even when one rank is the
        # neighbour on both sides (periodic size 2) or this rank itself (size 1: a copy).
        # A direction across a dimension of width 0 carries nothing.
        live = [nb for nb in grid.neighbours
                if nb.rank >= 0 and not any(o and not w for o, w in zip(nb.offset, widths))]
        sends, recvs = {}, {}
        for nb in sorted(live, key=lambda nb: nb.direction):
            sends.setdefault(nb.rank, []).extend(
                f[_box(f.shape, widths, nb.offset, ghost=False)] for f in fields)
        for nb in sorted(live, key=lambda nb: nb.opposite):
            recvs.setdefault(nb.rank, []).extend(
                f[_box(f.shape, widths, nb.offset, ghost=True)] for f in fields)
        self._graph = GraphExchange(sends, recvs, group=grid.group, tag_base=tag_base,
                                    pack_below=pack_below, _checked=True, _remote=self._remote)
        # For ready(): the faces each neighbour rank's message carries, this rank's own too
        # (a periodic dimension of size 1): its ghost cells are copied from its faces only
        # once they are all marked ready.
        self._rank_of = {nb.offset: nb.rank for nb in live}
        self._faces = {}
        for nb in live:
            self._faces.setdefault(nb.rank, set()).add(nb.offset)
        self._open, self._pending = False, {}

    def _check_neighbours(self, shape, directions):
        """Every rank tells each neighbour its fields (dtype and shape in the grid's
        dimensions) and widths, and checks what it is told against its own. ``shape`` None:
        this rank refused its own arguments, and tells its neighbours only that
        (``_REFUSED``), so that they raise rather than wait for it."""
        n = self.grid.ndim
        if shape is None:
            native, host, mine = False, 0, [_REFUSED]
        else:
            native = _native_backend(self._group, self.fields) is not None
            host = _host_id()
            mine = [len(self.fields), int(native), host] + self.widths
            for f in self.fields:
                mine += [_dtype_code(f.dtype)] + list(shape)
        mine = torch.tensor(mine, dtype=torch.int64)
        length = torch.tensor([mine.numel()], dtype=torch.int64)
        base = self.tag_base + directions
        peers = [nb for nb in self.grid.neighbours if nb.rank >= 0 and nb.rank != self.grid.rank]
        lengths = {nb.direction: torch.zeros(1, dtype=torch.int64) for nb in peers}
        works = [dist.irecv(lengths[nb.direction], self._peer(nb), group=self._group,
                            tag=base + nb.opposite) for nb in peers]
        works += [dist.isend(length, self._peer(nb), group=self._group, tag=base + nb.direction)
                  for nb in peers]
        for w in works:
            w.wait()
        theirs = {nb.direction: torch.zeros(int(lengths[nb.direction]), dtype=torch.int64)
                  for nb in peers}
        works = [dist.irecv(theirs[nb.direction], self._peer(nb), group=self._group,
                            tag=base + directions + nb.opposite) for nb in peers]
        works += [dist.isend(mine, self._peer(nb), group=self._group,
                             tag=base + directions + nb.direction) for nb in peers]
        for w in works:
            w.wait()
        if shape is None:
            return
        for nb in peers:
            t = theirs[nb.direction].tolist()
            what = f"the neighbour at offset {nb.offset} (rank {nb.rank})"
            if t[0] == _REFUSED:
                raise ValueError(f"commux.halo.HaloExchange: {what} refused its own arguments "
                                 "(its error says why), so no exchange with it can be built")
            if t[0] != len(self.fields):
                raise ValueError(f"commux.halo.HaloExchange: {what} exchanges {t[0]} fields, "
                                 f"this rank {len(self.fields)}")
            if t[1] != int(native):
                where = "on the CPU" if t[1] else "not on the CPU"
                raise ValueError(f"commux.halo.HaloExchange: the fields of {what} are {where}, "
                                 "this rank's not: every rank's fields are on the CPU, or none")
            if t[2] != host:
                self._remote.add(nb.rank)
            if t[3:3 + n] != self.widths:
                raise ValueError(f"commux.halo.HaloExchange: {what} has widths {t[3:3 + n]}, "
                                 f"this rank {self.widths}")
            for i in range(len(self.fields)):
                rec = t[3 + n + i * (1 + n):3 + n + (i + 1) * (1 + n)]
                if rec[0] != _dtype_code(self.fields[i].dtype):
                    raise ValueError(f"commux.halo.HaloExchange: field {i} of {what} has another "
                                     f"dtype than this rank's {self.fields[i].dtype}")
                for d in range(n):
                    if nb.offset[d] == 0 and rec[1 + d] != shape[d]:
                        raise ValueError(
                            f"commux.halo.HaloExchange: field {i} of {what} holds {rec[1 + d]} "
                            f"cells in dimension {d}, this rank {shape[d]}: the faces they "
                            "share differ")

    def _peer(self, nb) -> int:
        """The neighbour's rank as torch's p2p calls take it (global, for a subgroup)."""
        if self._group is None:
            return nb.rank
        return dist.get_global_rank(self._group, nb.rank)

    @property
    def native(self) -> bool:
        """Whether the steps run in commux's core (see GraphExchange.native)."""
        return self._graph.native

    def packing(self) -> dict:
        """See GraphExchange.packing."""
        return self._graph.packing()

    def sharing(self) -> dict:
        """See GraphExchange.sharing."""
        return self._graph.sharing()

    def start(self, ready: bool = True) -> StepWork:
        """Posts this step's receives, packs the faces and sends them. ``ready=False``
        (partitioned): posts the receives only; ``ready(offset)`` then marks the face
        towards ``offset`` computed, a neighbour's message going once every face in it is
        (this rank's own faces too: they are copied only once all are), and ``wait()``
        sends the rest. Returns the step as a ``StepWork`` (``wait()``,
        ``is_completed()``, ``get_future()``)."""
        work = self._graph.start(ready)
        self._open = True
        self._pending = {} if ready else {r: set(offsets) for r, offsets in self._faces.items()}
        return work

    @property
    def faces(self) -> list:
        """The offsets of the faces this exchange moves (what ``ready`` takes), in
        direction order."""
        return list(self._rank_of)

    def ready(self, offset):
        """The face towards ``offset`` (e.g. ``(0, 1)``) holds this step's values: its
        message goes once every face it carries is ready. A face this rank sends itself (a
        periodic dimension of size 1) counts alike: its ghost cells are copied from its own
        faces once they all are (or in ``wait()``). ValueError for an offset that is no face
        of this exchange."""
        if not self._open:
            raise RuntimeError("commux.halo.HaloExchange: ready() outside a step (start first)")
        offset = tuple(int(o) for o in offset)
        rank = self._rank_of.get(offset)
        if rank is None:
            raise ValueError(f"commux.halo.HaloExchange: {offset} is no face of this "
                             f"exchange (its faces: {sorted(self._rank_of)})")
        waiting = self._pending.get(rank)
        if waiting is None:
            return  # a step started ready, or the message gone already
        waiting.discard(offset)
        if not waiting:
            del self._pending[rank]
            self._graph.ready(rank)

    def wait(self):
        """Waits for this step's messages and writes the ghost cells."""
        self._open, self._pending = False, {}
        self._graph.wait()

    @property
    def in_flight(self) -> bool:
        """A step is started and has not ended (wait(), or its future)."""
        return self._graph.in_flight

    def exchange(self):
        """start() then wait()."""
        self._graph.exchange()


class GraphExchange:
    """A persistent exchange along a graph, for decompositions that are not a grid
    (unstructured meshes, ``MPI_Dist_graph_create_adjacent``'s case): ``sends`` maps each
    destination rank of the group to the tensors (views into the caller's fields, any
    strides) this rank sends it every step, ``recvs`` each source rank to the tensors its
    message fills, in the same order as that source lists them. One message per neighbour
    and step carries all of a pair's tensors; a rank may name itself (a copy).

    Collective over ``group``: the ranks swap their lists once, at construction, and every
    rank checks the whole graph, so a send nobody receives, or one whose tensors differ
    from the receiver's (count, dtype, elements), raises the same ValueError on every rank
    before anything moves.
    """

    def __init__(self, sends: dict, recvs: dict, group=None, tag_base: int = DEFAULT_TAG_BASE,
                 pack_below=None, _checked: bool = False, _remote=None):
        load_extension()
        if not 0 <= tag_base <= (1 << 31) - 1:
            raise ValueError(f"commux.halo.GraphExchange: tag_base {tag_base} is no tag")
        _check_pack_below(pack_below, "GraphExchange")
        size, rank = dist.get_world_size(group), dist.get_rank(group)
        sends = {int(r): list(ts) for r, ts in sends.items()}
        recvs = {int(r): list(ts) for r, ts in recvs.items()}
        for what, table in (("destination", sends), ("source", recvs)):
            for r, ts in table.items():
                if not 0 <= r < size:
                    raise ValueError(f"commux.halo.GraphExchange: {what} rank {r} is outside the "
                                     f"group of {size}")
                if not ts or not all(isinstance(t, torch.Tensor) for t in ts):
                    raise ValueError(f"commux.halo.GraphExchange: {what} rank {r} needs a list "
                                     "of tensors")
        if not _checked:  # (HaloExchange checked its neighbours itself, by name)
            hosts = _check_graph(sends, recvs, size, group)
            _remote = {r for r in range(size) if hosts[r] != hosts[rank]}
        self.group, self.rank, self.tag = group, rank, tag_base
        self._recvs = recvs
        self._failed = None  # (step, error) of the last step whose wait() raised
        backend = _native_backend(group, [t for ts in (*sends.values(), *recvs.values())
                                          for t in ts])
        self._native = None
        if backend is not None:
            # One C++ call per step: the core's exchange (halo/neighbour_exchange.hpp).
            ranks = sorted(set(sends) | set(recvs))
            # A neighbour on another host gets its own packing threshold unless the caller
            # chose one: over TCP a UCX iov of 1 KiB pieces cost 1.35x the packed message,
            # on one host 0.83x (docs/performance.md).
            far = REMOTE_PACK_BELOW if pack_below is None else None
            self._native = load_extension().NeighbourExchange(
                backend, [(r, sends.get(r), recvs.get(r), far if r in (_remote or ()) else None)
                          for r in ranks], tag_base,
                **({} if pack_below is None else {"pack_below": int(pack_below)}))
            self._ranks = ranks
            self._step = None
            return
        self._step = None
        self._future = None  # the step's, once asked (StepWork.get_future)
        self._ranks = set(sends) | set(recvs)
        self._local = list(zip(sends.get(rank, []), recvs.get(rank, [])))
        self._outs = {r: (ts, _packed(ts)) for r, ts in sends.items() if r != rank}
        self._unsent = set()
        self._in = [(r, ts, _packed(ts)) for r, ts in recvs.items() if r != rank]
        self._works = None

    @property
    def native(self) -> bool:
        """Whether the steps run in commux's core (a commux group, CPU tensors), not as
        torch p2p calls from Python."""
        return self._native is not None

    def packing(self) -> dict:
        """How each neighbour's messages travel on the native path: ``{rank: (send packed,
        receive packed)}``; a side not packed goes as a UCX iov of the tensors' memory."""
        if self._native is None:
            return {}
        return dict(zip(self._ranks, self._native.packing()))

    def sharing(self) -> dict:
        """Which neighbours' messages go through shared memory on the native path, the
        receiver copying straight out of the sender's tensors: ``{rank: (send shared,
        receive shared)}``. Neighbours on this host do from the second step on, where the
        host's ranks may read each other's memory (``COMMUX_SHM_CMA_BYTES``)."""
        if self._native is None:
            return {}
        return dict(zip(self._ranks, self._native.sharing()))

    def _peer(self, r: int) -> int:
        return r if self.group is None else dist.get_global_rank(self.group, r)

    def start(self, ready: bool = True) -> StepWork:
        """Posts this step's receives, packs what goes out and sends it. ``ready=False``
        (partitioned): posts the receives only; ``ready(rank)`` then sends each message as
        soon as its tensors hold this step's values, and ``wait()`` sends the rest.
        Returns the step as a ``StepWork``."""
        if self._native is not None:
            if ready:
                self._native.start()
            else:
                self._native.start_receives()
            self._step = StepWork(self)
            return self._step
        if self._works is not None:
            raise RuntimeError("commux.halo.GraphExchange: start() twice without wait()")
        self._step, self._future, self._chained = StepWork(self), None, False
        self._works = [dist.irecv(buf, self._peer(r), group=self.group, tag=self.tag)
                       for r, _, (buf, _) in self._in]
        # This rank's own message (a copy at the step's end) waits for ready() like the
        # others: a step ended by its future must not copy faces not computed yet.
        self._unsent = set(self._outs) | ({self.rank} if self._local else set())
        if ready:
            for r in list(self._unsent):
                self._send(r)
        return self._step

    @property
    def in_flight(self) -> bool:
        """A step is started and has not ended (wait(), or its future)."""
        if self._native is not None:
            return self._native.in_flight
        return self._works is not None

    def _received(self) -> list:
        return [t for r in sorted(self._ranks) for t in self._recvs.get(r, ())]

    def _future_of(self, step: StepWork):
        """StepWork.get_future: the core finishes the step where it ends (native), or the
        p2p Works' futures end it (Python path; a backend whose p2p Works have futures)."""
        if step is not self._step or not self.in_flight:
            done = torch.futures.Future()
            if self._failed is not None and self._failed[0] is step:
                done.set_exception(self._failed[1])
            else:
                done.set_result(self._received())
            return done
        if self._native is not None:
            step._work = self._native.step_work()
            return step._work.get_future()
        if self._future is None:
            if self._works:  # the step's Works are of one backend: asked once, here
                try:
                    self._works[0].get_future()
                except RuntimeError as e:
                    raise RuntimeError(
                        "commux.halo: this step's messages have no futures on this group's "
                        f"backend ({e}); call wait(), or run the exchange on a commux group"
                    ) from None
            self._future = torch.futures.Future()
            self._chain_if_sent()
        return self._future

    def _chain_if_sent(self):
        """Python path, a future asked: once every message is posted, the step ends when
        their Works' futures complete (on the thread that completes the last)."""
        if self._future is None or self._unsent or self._chained:
            return
        self._chained = True
        futures = [w.get_future() for w in self._works]
        future = self._future

        def finish(all_done):
            try:
                for f in all_done.value():
                    f.value()  # raises the message's error
                self._unpack()
                self._works = None
                future.set_result(self._received())
            except Exception as e:  # noqa: BLE001 (the step's error goes to its future)
                self._works = None
                future.set_exception(e)

        torch.futures.collect_all(futures).then(finish)

    def ready(self, rank: int):
        """Sends this step's message to group rank ``rank`` now (after ``start(ready=False)``).
        For this rank itself: its own message is copied from now on (at the step's end;
        a step ended by its future does not end before), and marking it again is harmless.
        Nothing for a rank it sends nothing; RuntimeError outside a step or for a message
        already sent, ValueError for a rank that is no neighbour."""
        if self._native is not None:
            self._native.ready(int(rank))
            return
        if self._works is None:
            raise RuntimeError("commux.halo.GraphExchange: ready() outside a step (start first)")
        rank = int(rank)
        if rank not in self._ranks:
            raise ValueError(f"commux.halo.GraphExchange: rank {rank} is not a neighbour of "
                             "this exchange")
        if rank == self.rank:
            if rank in self._unsent:
                self._send(rank)
                self._chain_if_sent()
            return
        if rank not in self._outs:
            return
        if rank not in self._unsent:
            raise RuntimeError(f"commux.halo.GraphExchange: the message to rank {rank} was "
                               "already sent this step")
        self._send(rank)
        self._chain_if_sent()

    def _send(self, r):
        if r == self.rank:  # copied in _unpack, once the step's messages are in
            self._unsent.discard(r)
            return
        ts, (buf, pieces) = self._outs[r]
        for piece, t in zip(pieces, ts):
            piece.copy_(t)
        self._works.append(dist.isend(buf, self._peer(r), group=self.group, tag=self.tag))
        self._unsent.discard(r)

    def wait(self):
        """Waits for this step's messages and writes the received tensors."""
        if self._native is not None:
            try:
                self._native.wait()
            except Exception as e:
                self._failed = (self._step, e)  # what the step's future says, if asked later
                raise
            return
        if self._works is None:
            if self._future is not None:
                self._future.wait()  # the step ends in its future: raises its error
                return
            raise RuntimeError("commux.halo.GraphExchange: wait() without start()")
        for r in list(self._unsent):
            self._send(r)
        if self._future is not None:  # the step ends in its future's chain
            self._chain_if_sent()
            for w in list(self._works or ()):
                w.wait()
            self._future.wait()
            return
        works, self._works = self._works, None
        for w in works:
            w.wait()
        self._unpack()

    def _unpack(self):
        for _, ts, (_, pieces) in self._in:
            for t, piece in zip(ts, pieces):
                t.copy_(piece)
        for src, dst in self._local:
            dst.copy_(src)

    def exchange(self):
        """start() then wait()."""
        if self._native is not None:  # the small steps' cost is in the Python around them
            self._step = None
            self._native.start()
            self._native.wait()
            return
        self.start()
        self.wait()


class StepWork:
    """One step of an exchange, as ``start()`` returns it, with the face of torch's Work:
    ``wait()`` is the exchange's ``wait()`` while the step is in flight; ``get_future()``
    returns a ``torch.futures.Future`` that completes, with the list of tensors received
    into, once every message of the step has been sent (``ready()`` for each, or ``wait()``)
    and has ended, on the thread that ends it, with nobody calling ``wait()`` (then chain
    the next step, or a compute, in its ``then``). Only ``wait()`` times a step out. Without
    ``get_future()`` the step ends in ``wait()`` on the caller's thread, the fastest way.
    On the Python path (gloo, CUDA tensors) futures need a backend whose p2p Works have
    them (commux's do; gloo's do not: RuntimeError)."""

    __slots__ = ("_exchange", "_work", "_future")

    def __init__(self, exchange):
        self._exchange = exchange
        self._work = None  # the native c10d Work, once its future was asked
        self._future = None

    def get_future(self):
        if self._future is None:
            self._future = self._exchange._future_of(self)
        return self._future

    def wait(self, timeout=None):
        """The exchange's wait() while this step is in flight; else its outcome (the error
        of a step that ended in its future is raised). ``timeout`` is the group's."""
        ex = self._exchange
        if self._work is not None:  # the step ends by itself: its own wait
            self._work.wait()
        elif self is ex._step and ex.in_flight:
            ex.wait()
        elif self._future is not None:
            self._future.wait()
        return True

    def is_completed(self) -> bool:
        ex = self._exchange
        if self._work is not None:
            return self._work.is_completed()
        return not (self is ex._step and ex.in_flight)


def _halo_arguments(fields, widths, n):
    """HaloExchange's own arguments checked: (fields, widths, shape in the grid's ``n``
    dimensions), or ValueError. Every size is checked before anything is built from it."""
    if isinstance(fields, torch.Tensor):
        fields = [fields]
    fields = list(fields)
    if not fields:
        raise ValueError("commux.halo.HaloExchange: no fields")
    if not all(isinstance(f, torch.Tensor) for f in fields):
        raise ValueError("commux.halo.HaloExchange: the fields must be tensors")
    if isinstance(widths, int):
        widths = [widths] * n
    widths = [int(w) for w in widths]
    if len(widths) != n:
        raise ValueError(f"commux.halo.HaloExchange: {len(widths)} widths for a grid of {n} "
                         "dimensions")
    shape = tuple(fields[0].shape[:n])
    for i, f in enumerate(fields):
        if f.dim() < n:
            raise ValueError(f"commux.halo.HaloExchange: field {i} has {f.dim()} dimensions; "
                             f"the grid has {n}")
        if tuple(f.shape[:n]) != shape:
            raise ValueError(f"commux.halo.HaloExchange: field {i} is {tuple(f.shape[:n])} "
                             f"in the grid's dimensions, field 0 {shape}")
        if f.device != fields[0].device:
            raise ValueError("commux.halo.HaloExchange: the fields are on different devices")
    for d, w in enumerate(widths):
        # (A width past the field would not even reach the core's 64-bit check.)
        if w < 0 or w > shape[d]:
            raise ValueError(f"commux.halo.HaloExchange: widths[{d}] is {w}, for a field of "
                             f"{shape[d]} cells in dimension {d}: a width is 0 or more, and "
                             "an interior narrower than the halo cannot send its faces")
    _box(shape, widths, [0] * n, ghost=False)  # the core refuses a halo wider than the interior
    return fields, widths, shape


def _check_pack_below(pack_below, who):
    """A packing threshold is a byte count the core takes as a size_t: ValueError otherwise."""
    if pack_below is not None and not 0 <= int(pack_below) < 1 << 64:
        raise ValueError(f"commux.halo.{who}: pack_below is {pack_below}; it is a number of "
                         "bytes, 0 to 2**64 - 1")


def _native_backend(group, tensors):
    """The commux backend of `group` when every tensor is on the CPU (the core's exchange
    runs the steps), else None (torch p2p calls from Python). Every rank of a group has the
    same backend; a rank whose tensors are elsewhere sends messages the others' native
    receives refuse clearly (their packing differs)."""
    if any(t.device.type != "cpu" for t in tensors):
        return None
    if group is None:
        group = dist.group.WORLD
    try:
        backend = group._get_backend(torch.device("cpu"))
    except (RuntimeError, ValueError, AttributeError):
        return None
    return backend if isinstance(backend, load_extension().ProcessGroupUCX) else None


def _check_graph(sends, recvs, size, group):
    """Every rank gets every rank's lists and checks every edge (a collective); returns
    every rank's host id."""
    native = _native_backend(group, [t for ts in (*sends.values(), *recvs.values())
                                     for t in ts]) is not None
    mine = ({r: [(str(t.dtype), t.numel()) for t in ts] for r, ts in sends.items()},
            {r: [(str(t.dtype), t.numel()) for t in ts] for r, ts in recvs.items()}, native,
            _host_id())
    everyone = [None] * size
    dist.all_gather_object(everyone, mine, group=group)
    for a in range(size):
        for b, items in everyone[a][0].items():
            expected = everyone[b][1].get(a)
            if expected is None:
                raise ValueError(f"commux.halo.GraphExchange: rank {a} sends to rank {b}, "
                                 f"which receives nothing from it")
            if expected != items:
                raise ValueError(f"commux.halo.GraphExchange: rank {a} sends rank {b} "
                                 f"{items}, which receives {expected} (dtype, elements)")
            if everyone[a][2] != everyone[b][2]:
                raise ValueError(f"commux.halo.GraphExchange: rank {a}'s tensors are "
                                 f"{'' if everyone[a][2] else 'not '}all on the CPU and rank "
                                 f"{b}'s {'' if everyone[b][2] else 'not '}: the two would "
                                 "exchange in different ways (every rank's on the CPU, or none)")
        for b in everyone[a][1]:
            if a not in everyone[b][0]:
                raise ValueError(f"commux.halo.GraphExchange: rank {a} receives from rank "
                                 f"{b}, which sends it nothing")
    return [e[3] for e in everyone]


def _host_id() -> int:
    """This host's name as a number every process of it computes alike (namespace hosts
    have names of their own)."""
    return zlib.crc32(socket.gethostname().encode())


def _dtype_code(dtype: torch.dtype) -> int:
    # A stable number per dtype for the neighbour check: its name's hash would differ
    # between processes (PYTHONHASHSEED), its position in this list does not.
    names = sorted(str(t) for t in vars(torch).values() if isinstance(t, torch.dtype))
    return names.index(str(dtype))


__all__ = ["CartGrid", "HaloExchange", "GraphExchange", "Neighbour", "DEFAULT_TAG_BASE"]
