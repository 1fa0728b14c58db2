"""torchft's multi-group collective tests for what its gloo group cannot run (reduce_scatter,
its coalesced form, alltoall_base), on commux.torchft.ProcessGroupUCX: each collective on 3
ranks, then with resiliency (one rank shuts its group down; the others' next collective
fails at once and they reconfigure). Run with ``-p commux_swap`` (tests/torchft)."""

from typing import List

from parameterized import parameterized

from torchft.process_group_test import MultiPgBaseTest

# Collectives torchft's own NormalGlooMultiPgTest skips for gloo.
GLOO_CANNOT = ["alltoall_base", "reduce_scatter", "reduce_scatter_tensor_coalesced"]


class CommuxMultiPgTest(MultiPgBaseTest):
    BACKEND = "gloo"  # commux_swap makes torchft's "gloo" group commux's
    WORLD_SIZE = 3
    COLLECTIVES: List[str] = GLOO_CANNOT

    @parameterized.expand(COLLECTIVES)
    def test_collective(self, collective: str) -> None:
        self._run_parallel(collective, device="cpu")

    @parameterized.expand(COLLECTIVES)
    def test_collective_with_resiliency(self, collective: str) -> None:
        self._run_with_resiliency(collective, device="cpu")
