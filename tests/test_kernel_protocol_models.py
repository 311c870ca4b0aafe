"""The Hopper kernels' synchronisation models, run in CI (no GPU needed).

tests/gpu/cuda/fwd_protocol_model.py and bwd_protocol_model.py replay the kernels' mbarrier /
named-barrier protocols (producer rings, issue tokens, warpgroup skipping, persistent tiles) under
random interleavings and assert: no deadlock, no stage refilled while read, every block reads its
own tile. A protocol change in cuda/hopper that breaks them fails here before it reaches a GPU.
Also checked: the models catch two protocol bugs when they are put in (a skipped warpgroup's last
V stage released without waiting for it to fill, and the persistent kernel's next Q loaded before
every warpgroup released the Q buffer).
"""

from __future__ import annotations

import pathlib
import random
from types import ModuleType

import pytest
from script_module import load_script

_MODELS = pathlib.Path(__file__).parent / "gpu" / "cuda"


def _load(name: str) -> ModuleType:
    return load_script(_MODELS / f"{name}.py")


@pytest.mark.slow
def test_forward_protocol_model_plain_kernel() -> None:
    _load("fwd_protocol_model").main()


@pytest.mark.slow
def test_forward_protocol_model_persistent_kernel() -> None:
    _load("fwd_protocol_model").main_persistent()


def _assert_persistent_mutant_fails(
    good: str, bad: str, n_blocks: int, seed: int, skip: bool, causal: bool
) -> None:
    """The persistent forward model with `good` (which must occur once) replaced by `bad` fails
    within a few hundred random schedules per (W, stages): the model can see that bug."""
    source = (_MODELS / "fwd_protocol_model.py").read_text()
    assert source.count(good) == 1, "the model's code under mutation moved: update this test"
    namespace: dict = {"__name__": "fwd_protocol_model_mutant"}
    exec(compile(source.replace(good, bad), "fwd_protocol_model_mutant", "exec"), namespace)
    rng = random.Random(seed)
    with pytest.raises(AssertionError):
        for W in (2, 3):
            for stages in (2, 3):
                for _ in range(200):
                    namespace["simulate_persistent"](
                        W, n_blocks, 5, stages, rng, skip=skip, causal=causal
                    )


def test_forward_persistent_model_catches_an_unwaited_release() -> None:
    """The persistent model with a bug put in (a skipping warpgroup's V(n_mine) released without
    waiting for it to fill) fails: the model is strong enough to see it."""
    good = """            if nm < n_blocks:
                yield from wait_full("V", (t, nm))
                release("V")"""
    bad = """            if nm < n_blocks:
                release("V")"""
    # WgSkip under the causal mask ("hd64 persistent"): only a skipping warpgroup passes blocks on.
    _assert_persistent_mutant_fails(good, bad, n_blocks=4, seed=3, skip=True, causal=True)


@pytest.mark.slow
def test_backward_protocol_model() -> None:
    """The backward kernels' protocol (hd64/hd128 with the dQ writer warp, deterministic mode,
    the hd128 persistent tile hand-out, the hd256 64 x 80 kernel) under random interleavings."""
    assert _load("bwd_protocol_model").main() == 0


def test_backward_protocol_model_catches_its_mutations() -> None:
    """Each bug the backward model lists (e.g. the dQ tile freed before the bulk engine read it,
    the persistent kernel's next K/V loaded before kv_empty) makes some trial fail."""
    assert _load("bwd_protocol_model").mutation_check(random.Random(1))


@pytest.mark.slow
def test_backward_layout_check() -> None:
    """The backward's shared-memory layouts, wgmma operands, dq_accum fragment order, tiling and
    deterministic dQ order for BwdHd64, BwdHd128 and BwdHd256 (numpy, a few seconds)."""
    assert _load("bwd_layout_check").main() == 0


def test_forward_persistent_model_catches_a_next_q_loaded_too_early() -> None:
    """The persistent model with the producer's wait on q_empty before the next tile's Q load
    removed fails: the next tile's Q would overwrite the one Q buffer while a warpgroup still reads
    it. Without WgSkip ("hd128 persistent") and with it, causal ("hd64 persistent")."""
    good = """            while not q_empty.done(q_phase ^ 1):
                yield
            q_phase ^= 1"""
    bad = "            q_phase ^= 1"
    _assert_persistent_mutant_fails(good, bad, n_blocks=3, seed=5, skip=False, causal=False)
    _assert_persistent_mutant_fails(good, bad, n_blocks=3, seed=6, skip=True, causal=True)
