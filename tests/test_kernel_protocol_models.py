"""The Hopper kernels' synchronisation models, run in CI (no GPU needed).

tests/gpu/cuda/fwd_protocol_model.py and bwd_protocol_model.py replay the kernels' mbarrier /
named-barrier protocols (producer rings, issue tokens, warpgroup skipping, persistent tiles) under
random interleavings and assert: no deadlock, no stage refilled while read, every block reads its
own tile. A protocol change in cuda/hopper that breaks them fails here before it reaches a GPU.
Also checked: the models still catch a protocol bug they once found (a skipped warpgroup's last V
stage released without waiting for it to fill), and a next Q loaded into a buffer still read
(the two-Q-buffer persistent kernel).
"""

from __future__ import annotations

import importlib.util
import pathlib
import random
import sys
from types import ModuleType

import pytest

_MODELS = pathlib.Path(__file__).parent / "gpu" / "cuda"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, _MODELS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_forward_protocol_model_plain_kernel() -> None:
    _load("fwd_protocol_model").main()


def test_forward_protocol_model_persistent_kernel() -> None:
    _load("fwd_protocol_model").main_persistent()


def _assert_persistent_mutant_fails(
    good: str, bad: str, n_blocks: int, seed: int, **kw: object
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
                        W, n_blocks, 5, stages, rng, o_in_q=False, skip=True, causal=True, **kw
                    )


def test_forward_persistent_model_catches_an_unwaited_release() -> None:
    """The persistent model with a bug it once caught put back (a skipping warpgroup's V(n_mine)
    released without waiting for it to fill) fails: the model is strong enough to see it."""
    good = """            if nm < n_blocks:
                yield from wait_full("V", (t, nm))
                release("V")"""
    bad = """            if nm < n_blocks:
                release("V")"""
    _assert_persistent_mutant_fails(good, bad, n_blocks=4, seed=3)


def test_backward_protocol_model() -> None:
    assert _load("bwd_protocol_model").main() == 0


def test_forward_persistent_model_catches_a_next_q_loaded_too_early() -> None:
    """Two Q buffers (hd128 V23): the model with the producer's wait for the other buffer's
    release removed fails (the next tile's Q would overwrite a Q still being read)."""
    good = """            while not q_empty[b].done(q_phase[b] ^ 1):
                yield
            q_phase[b] ^= 1"""
    _assert_persistent_mutant_fails(
        good, "            q_phase[b] ^= 1", n_blocks=3, seed=5, q_stages=2
    )
