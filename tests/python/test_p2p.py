"""Point-to-point semantics: tag matching, ordering, any-source, dtypes,
shapes, non-contiguous tensors and >2 GiB messages.

All checks go through the public ``torch.distributed`` API
(``send``/``recv``/``isend``/``irecv``) with real processes.
"""

import random

import pytest
import torch
import torch.distributed as dist

from harness import is_ucx, run_ranks

ALL_DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
]


def payload(dtype, shape, seed):
    """Deterministic, dtype-specific data that differs per ``seed``."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype) * 100
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)


# --------------------------------------------------------------------------
# Tags and ordering
# --------------------------------------------------------------------------


def _tags_and_ordering(rank, world_size):
    # (a) Receives posted in a different tag order than the sends: each
    # buffer must get the message carrying its own tag.  Same size and dtype
    # for all three so that a backend ignoring tags delivers wrong *data*.
    if rank == 0:
        works = [dist.isend(torch.full((64,), float(tag * 10)), 1, tag=tag) for tag in (1, 2, 3)]
        for w in works:
            w.wait()
    else:
        bufs = {tag: torch.zeros(64) for tag in (3, 1, 2)}
        works = {tag: dist.irecv(bufs[tag], 0, tag=tag) for tag in (3, 1, 2)}
        for tag in (3, 1, 2):
            works[tag].wait()
        for tag, b in bufs.items():
            assert torch.equal(b, torch.full((64,), float(tag * 10))), (
                f"irecv(tag={tag}) got the message {b[0].item()} (expected {tag * 10}): "
                "tags are not matched"
            )

    # (b) Same (sender, tag): messages are delivered in send order, both to
    # pre-posted irecvs waited in reverse order and to blocking recvs.
    for round_ in range(2):
        if rank == 0:
            works = [dist.isend(torch.full((16,), float(v)), 1, tag=7) for v in range(5)]
            for w in works:
                w.wait()
        else:
            if round_ == 0:
                bufs = [torch.full((16,), -1.0) for _ in range(5)]
                works = [dist.irecv(b, 0, tag=7) for b in bufs]
                for w in reversed(works):
                    w.wait()
            else:
                bufs = []
                for _ in range(5):
                    b = torch.full((16,), -1.0)
                    dist.recv(b, 0, tag=7)
                    bufs.append(b)
            got = [b[0].item() for b in bufs]
            assert got == [0.0, 1.0, 2.0, 3.0, 4.0], (
                f"round {round_}: same-tag messages arrived out of order: {got}"
            )
            for b in bufs:
                assert torch.equal(b, torch.full_like(b, b[0].item()))

    # (c) 200 messages, 10 tags, different sizes; receives posted in a
    # random order.  Per (sender, tag) the k-th posted receive must get the
    # k-th sent message with that tag.
    n_msgs = 200
    rng = random.Random(1234)
    tags = [rng.randrange(10) for _ in range(n_msgs)]
    sizes = [1 + (i * 37) % 97 for i in range(n_msgs)]
    by_tag = {}
    for i, tag in enumerate(tags):
        by_tag.setdefault(tag, []).append(i)
    if rank == 0:
        works = [
            dist.isend(torch.full((sizes[i],), float(i), dtype=torch.float64), 1, tag=tags[i])
            for i in range(n_msgs)
        ]
        for w in works:
            w.wait()
    else:
        recv_tags = list(tags)
        rng.shuffle(recv_tags)
        next_k = {t: 0 for t in by_tag}
        posted = []  # (expected message index, buffer, work)
        for tag in recv_tags:
            i = by_tag[tag][next_k[tag]]
            next_k[tag] += 1
            buf = torch.full((sizes[i],), -1.0, dtype=torch.float64)
            posted.append((i, buf, dist.irecv(buf, 0, tag=tag)))
        order = list(range(n_msgs))
        rng.shuffle(order)
        for j in order:
            posted[j][2].wait()
        for i, buf, _ in posted:
            assert torch.equal(buf, torch.full((sizes[i],), float(i), dtype=torch.float64)), (
                f"message {i} (tag {tags[i]}) received as {buf[:4].tolist()}..."
            )

    # (d) Extreme tag values.
    hi = 2**31 - 1
    if rank == 0:
        w1 = dist.isend(torch.full((8,), 111.0), 1, tag=hi)
        w0 = dist.isend(torch.full((8,), 222.0), 1, tag=0)
        w1.wait()
        w0.wait()
    else:
        b0, b1 = torch.zeros(8), torch.zeros(8)
        r0 = dist.irecv(b0, 0, tag=0)
        r1 = dist.irecv(b1, 0, tag=hi)
        r0.wait()
        r1.wait()
        assert torch.equal(b0, torch.full((8,), 222.0)), f"tag 0 got {b0[0].item()}"
        assert torch.equal(b1, torch.full((8,), 111.0)), f"tag 2**31-1 got {b1[0].item()}"
    return True


def test_tag_matching_and_ordering():
    """Tags select messages (out-of-order receive posting), same-tag messages
    are non-overtaking, 200 mixed-tag messages with random receive order all
    match correctly, and tags 0 and 2**31-1 work."""
    run_ranks(_tags_and_ordering, 2)


# --------------------------------------------------------------------------
# Any-source receives
# --------------------------------------------------------------------------


def _any_source(rank, world_size):
    n = 32

    def msg(sender, round_):
        return torch.arange(n, dtype=torch.float32) + 1000 * sender + 100 * round_

    if rank == 0:
        # Blocking recv(src=None): returns the sender rank.
        senders = []
        for _ in range(world_size - 1):
            buf = torch.zeros(n)
            src = dist.recv(buf, src=None, tag=11)
            assert isinstance(src, int) and 1 <= src < world_size, f"recv returned sender {src!r}"
            assert torch.equal(buf, msg(src, 0)), (
                f"recv(src=None) reported sender {src} but the data came from "
                f"rank {int(buf[0].item()) // 1000}"
            )
            senders.append(src)
        assert sorted(senders) == list(range(1, world_size)), f"senders {senders}"

        # irecv(src=None): the work reports the sender.
        bufs = [torch.zeros(n) for _ in range(world_size - 1)]
        works = [dist.irecv(b, src=None, tag=12) for b in bufs]
        senders = []
        for b, w in zip(bufs, works):
            w.wait()
            sr = w._source_rank() if hasattr(w, "_source_rank") else w.source_rank()
            assert torch.equal(b, msg(sr, 1)), (
                f"irecv(src=None) work reported sender {sr} but data came from "
                f"rank {int(b[0].item()) // 1000}"
            )
            senders.append(sr)
        assert sorted(senders) == list(range(1, world_size)), f"senders {senders}"
    else:
        dist.send(msg(rank, 0), 0, tag=11)
        dist.send(msg(rank, 1), 0, tag=12)
    return True


def test_recv_any_source_reports_sender():
    """recv(src=None) returns the real sender and irecv(src=None)'s work
    reports it via _source_rank(); with 3 ranks rank 0 receives from ranks 1
    and 2 and the data matches the reported sender."""
    run_ranks(_any_source, 3)


# --------------------------------------------------------------------------
# Dtypes and shapes
# --------------------------------------------------------------------------


def _dtypes_and_empty(rank, world_size):
    shapes = [(3, 5), (1000,), (1,)]
    for di, dtype in enumerate(ALL_DTYPES):
        for si, shape in enumerate(shapes):
            seed = di * 10 + si
            tag = di * 10 + si
            if rank == 0:
                dist.send(payload(dtype, shape, seed), 1, tag=tag)
            else:
                buf = torch.zeros(shape, dtype=dtype)
                dist.recv(buf, 0, tag=tag)
                exp = payload(dtype, shape, seed)
                assert torch.equal(buf, exp), f"{dtype} {shape}: received data differs"
    # Zero-element tensors of several dtypes/shapes must complete.
    for k, (dtype, shape) in enumerate(
        [(torch.float32, (0,)), (torch.int64, (3, 0)), (torch.bool, (0, 4)), (torch.complex128, (0,))]
    ):
        if rank == 0:
            dist.send(torch.empty(shape, dtype=dtype), 1, tag=500 + k)
        else:
            buf = torch.empty(shape, dtype=dtype)
            dist.recv(buf, 0, tag=500 + k)
            assert buf.shape == torch.Size(shape)
    # A real message after the empty ones still matches correctly.
    if rank == 0:
        dist.send(torch.arange(10.0), 1, tag=600)
    else:
        buf = torch.zeros(10)
        dist.recv(buf, 0, tag=600)
        assert torch.equal(buf, torch.arange(10.0))
    return True


def test_all_dtypes_and_zero_element_roundtrip():
    """Every dtype (fp16/bf16/fp32/fp64/complex64/complex128/int8/uint8/int16/
    int32/int64/bool) arrives bit-exact over p2p; zero-element tensors are
    sent/received without hanging or erroring."""
    run_ranks(_dtypes_and_empty, 2)


def _noncontiguous(rank, world_size):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    if rank == 0:
        strided = base[:, ::2]
        transposed = base.t()
        assert not strided.is_contiguous() and not transposed.is_contiguous()
        dist.send(strided, 1, tag=1)
        dist.send(transposed, 1, tag=2)
        # Contiguous data that rank 1 receives into non-contiguous views.
        dist.send(torch.arange(12, dtype=torch.float32) + 100, 1, tag=3)
        dist.send(torch.arange(15, dtype=torch.float32) + 200, 1, tag=4)
    else:
        a = torch.zeros(4, 3)
        dist.recv(a, 0, tag=1)
        assert torch.equal(a, base[:, ::2]), f"strided send arrived as {a}"
        b = torch.zeros(6, 4)
        dist.recv(b, 0, tag=2)
        assert torch.equal(b, base.t()), f"transposed send arrived as {b}"

        # Receive into every other column of a (4, 6) buffer: the received
        # values land in the view, the other columns stay untouched.
        target = torch.full((4, 6), -1.0)
        view = target[:, 1::2]
        assert not view.is_contiguous()
        dist.recv(view, 0, tag=3)
        exp = (torch.arange(12, dtype=torch.float32) + 100).reshape(4, 3)
        assert torch.equal(target[:, 1::2], exp), f"view got {target[:, 1::2]}"
        assert torch.equal(target[:, 0::2], torch.full((4, 3), -1.0)), (
            f"receive into a view clobbered the rest of the base tensor: {target}"
        )
        # Receive into a transposed view.
        base2 = torch.full((5, 3), -1.0)
        tview = base2.t()
        dist.recv(tview, 0, tag=4)
        exp2 = (torch.arange(15, dtype=torch.float32) + 200).reshape(3, 5)
        assert torch.equal(tview, exp2), f"transposed view got {tview}"
        assert torch.equal(base2, exp2.t())
    return True


@pytest.mark.skipif(not is_ucx(), reason="gloo rejects non-contiguous tensors in send/recv "
                    "('input tensor has to be contiguous'); commux must handle them")
def test_noncontiguous_send_and_recv_into_view():
    """Non-contiguous tensors (t[:, ::2], t.t()) are sent by value, and
    receiving into a non-contiguous view fills exactly the view's elements
    (the base tensor's other elements are untouched)."""
    run_ranks(_noncontiguous, 2)


# --------------------------------------------------------------------------
# > 2 GiB message
# --------------------------------------------------------------------------

LARGE_BYTES = 2**31 + 64  # crosses the int32 boundary by 64 bytes
_MUL = 6364136223846793005
_ADD = 1442695040888963407


def _expected_words(start, stop):
    """int64 words [start, stop) of the large test pattern (wrapping mul/add)."""
    return torch.arange(start, stop, dtype=torch.int64).mul_(_MUL).add_(_ADD)  # in place: 1 copy


def _large_message(rank, world_size):
    n_words = LARGE_BYTES // 8
    if rank == 0:
        words = _expected_words(0, n_words)
        checksum = torch.stack([words.sum(), words[::4097].sum()])
        dist.send(words.view(torch.uint8), 1, tag=5)
        dist.send(checksum, 1, tag=6)
        return None
    buf = torch.zeros(LARGE_BYTES, dtype=torch.uint8)
    dist.recv(buf, 0, tag=5)
    sender_sum = torch.zeros(2, dtype=torch.int64)
    dist.recv(sender_sum, 0, tag=6)
    words = buf.view(torch.int64)
    # Slices: start, around the 2**31-byte boundary, the tail, a middle one.
    checks = {
        "head": (0, 4096),
        "middle": (n_words // 2, n_words // 2 + 4096),
        "before 2**31": (2**31 // 8 - 4096, 2**31 // 8),
        "after 2**31 (last 64 bytes)": (2**31 // 8, n_words),
    }
    for name, (a, b) in checks.items():
        assert torch.equal(words[a:b], _expected_words(a, b)), (
            f"large message: words {a}:{b} ({name}) are wrong"
        )
    got = torch.stack([words.sum(), words[::4097].sum()])
    assert torch.equal(got, sender_sum), (
        f"large message checksum mismatch: got {got.tolist()}, sender {sender_sum.tolist()}"
    )
    return None


@pytest.mark.large
@pytest.mark.timeout(400)
def test_message_larger_than_2GiB():
    """A 2**31 + 64 byte uint8 message arrives intact (catches int32 size /
    offset overflows); verified with slices around the 2 GiB boundary and an
    int64 checksum.  Deselect with -m 'not large'."""
    run_ranks(_large_message, 2, timeout=300)
