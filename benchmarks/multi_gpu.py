"""Multi-device jax_fa4: data parallel and ring attention over the sequence, checked and timed.

Every problem is fixed (strong scaling) and runs once on one device, then on the first N devices
for every N of ``--device-counts`` (default: 2, 4, 8, ... up to the machine's count, and the
full count), in these modes:

* ``one-device``: ``jax_fa4.attention`` under ``jax.jit`` on device 0 (the reference);
* ``data-parallel``: the same call under plain ``jax.jit`` with q/k/v (and segment ids) sharded
  over the batch (``NamedSharding``): the automatic partitioning runs the kernel per shard, no
  communication;
* ``ring-shard_map``: ``jax_fa4.ring_attention`` inside ``jax.shard_map`` with the sequence split
  over the N devices (zig-zag layout when causal without a window, so every device gets the same
  work; contiguous with a window, whose ring skips the steps the window cannot see);
* ``ring-jit``: plain ``jax.jit`` with q/k/v (and segment ids) sharded over the sequence
  (natural order): the automatic partitioning reaches the same ring, the variants' included
  (causal without a window: it moves the chunks into the zig-zag order itself, a few extra
  ppermutes). A record whose compiled forward has no collective-permute (the partitioning
  gathered the sequence instead: exact, but no sequence split) says so in its notes.

Variants (``--variants``, a comma list, default all):

* ``dense``: plain attention, causal and not (``--causal``);
* ``window``: ``local_window_size=(W, 0)`` with ``causal=True`` (``--window``);
* ``segments``: packed documents, ``segment_ids`` int32 ``[batch, seq]`` with ``--docs``
  equal-length documents per row, causal inside each document;
* ``gqa``: ``dense`` with ``heads // 4`` kv heads (at least 1; ``--kv-heads`` overrides).

Checks. Every mode's o, lse and the gradients dq, dk, dv (``jax.vjp`` pulled back with a fixed
random cotangent of (o, lse), the same in every mode) are compared in float32 with the
one-device result, in natural sequence order; they are the outputs of the first call of the
timed programs themselves. A quantity x passes when ``max|x - x_1dev| <= u * eps(dtype) *
max(1, max|x_1dev|)`` with ``u = 4`` for bfloat16/float16 (both results are rounded to the
dtype once, after float32 sums in a different order: about one unit apart) and ``u = 16`` for
float32 (the difference is then the float32 summation order itself: the ring merges its steps'
partial results and accumulates dK/dV block by block, a few units per step; up to 5 units
measured on 8 CPU devices). lse (float32) passes within ``u * eps(float32) * max(1, max|lse|)``
or ``4 * eps(dtype)``, whichever is larger (its terms are products of the input dtype). Rows
that see no key must match exactly (lse ``-inf``). ``ok`` needs every compared quantity to pass;
with ``--no-backward`` (or a platform without a backward kernel, whose NotImplementedError is
noted) only o and lse are compared. A mode the library refuses for a variant (a ValueError or
NotImplementedError at trace time) is recorded with ``ok: null`` and the reason in its notes;
any other error is ``ok: false``. Each record also counts, in its compiled forward program (one
call), the jax_fa4 forward kernel calls and the collectives, so that a ring's skipped steps and
a path without a ring show.

Times are medians of ``--repeats`` runs of one jit holding a chain of ``--chain`` calls (``q =
attention(q, k, v)``, a real data dependency), divided by the chain length. The backward time is
that of a chain of ``jax.vjp`` + pullback calls minus the forward time. Speed-up is the
one-device time over the mode's time (ideal: N). FLOPs as FlashAttention counts them: forward
``4 * b * h * d`` per visible (query, key) pair (``s^2``, halved when causal; a window's band
counted exactly; documents each their own causal square), backward 2.5x.

GPU (every GPU of the machine; --device-counts 2,4,8 picks subsets):
    python benchmarks/multi_gpu.py --json benchmarks/results/h200-multi-gpu-Ngpu.json
CPU smoke test (8 host devices, tiny float32 shapes, counts 2, 4, 8):
    python benchmarks/multi_gpu.py --cpu-devices 8
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

VARIANTS = ("dense", "window", "segments", "gqa")
MODES = {"dp": ("data-parallel",), "ring": ("ring-shard_map", "ring-jit")}


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=0,
        help="run on this many host CPU devices instead of the GPUs (smoke test; small defaults)",
    )
    p.add_argument("--devices", type=int, default=0, help="use the first N devices (0: all)")
    p.add_argument(
        "--device-counts",
        default=None,
        help="comma list of device counts to run each problem on (default: 2, 4, 8, ... up to "
        "the device count, and the device count)",
    )
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma list of {', '.join(VARIANTS)} (default: all)",
    )
    p.add_argument("--dtype", default=None, help="bfloat16 (GPU default) / float16 / float32")
    p.add_argument("--heads", type=int, default=None, help="q heads (GPU default 16, CPU 4)")
    p.add_argument(
        "--kv-heads", type=int, default=None, help="kv heads of the gqa variant (heads // 4)"
    )
    p.add_argument("--head-dim", type=int, default=None, help="GPU default 128, CPU 32")
    p.add_argument(
        "--dp-batch-per-device",
        type=int,
        default=None,
        help="data parallel: batch per device at the largest device count (GPU 2, CPU 1)",
    )
    p.add_argument("--dp-seq", type=int, default=None, help="data parallel: sequence length")
    p.add_argument(
        "--ring-seq-per-device",
        type=int,
        default=None,
        help="ring: sequence per device at the largest device count (GPU 4096, CPU 64); the "
        "global sequence is this x the largest count, batch 1, the same for every count",
    )
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both", help="dense, gqa")
    p.add_argument(
        "--window",
        type=int,
        default=None,
        help="window variant: local_window_size=(W, 0), causal (GPU 4096, CPU 48)",
    )
    p.add_argument("--docs", type=int, default=4, help="segments variant: documents per row")
    p.add_argument("--chain", type=int, default=None, help="calls per timed jit (GPU 4, CPU 1)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs (GPU 5, CPU 3)")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--json", default=None, help="write the results here")
    return p.parse_args(argv)


ARGS = _parse_args() if __name__ == "__main__" else _parse_args([])
if ARGS.cpu_devices:
    # Must happen before jax is imported.
    os.environ["JAX_PLATFORMS"] = "cpu"
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (
        f"{flags} --xla_force_host_platform_device_count={ARGS.cpu_devices}".strip()
    )

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_fa4  # noqa: E402

GRADS = ("dq", "dk", "dv")


@dataclass
class Problem:
    kind: str  # "dp" (batch split) or "ring" (sequence split)
    variant: str
    batch: int
    seq: int
    heads: int
    heads_kv: int
    head_dim: int
    dtype: str
    causal: bool
    window: int | None = None  # local_window_size=(window, 0)
    docs: int | None = None  # segment ids: documents per row

    def segment_ids(self) -> np.ndarray | None:
        """int32 [batch, seq]: document j holds positions [j * seq / docs, (j + 1) * seq / docs)
        (equal lengths when docs divides seq)."""
        if not self.docs:
            return None
        ids = (np.arange(self.seq, dtype=np.int64) * self.docs) // self.seq
        return np.broadcast_to(ids.astype(np.int32), (self.batch, self.seq)).copy()

    def visible_pairs(self) -> float:
        """(query, key) pairs per row and head, as FlashAttention counts them."""
        s = self.seq
        if self.window is not None:
            return float(np.minimum(np.arange(s), self.window).sum() + s)
        if self.docs:
            lengths = np.bincount(self.segment_ids()[0])
            return float((lengths.astype(np.float64) ** 2).sum() / 2)
        return s * s / 2 if self.causal else float(s * s)

    def fwd_flops(self) -> float:
        return 4.0 * self.batch * self.heads * self.head_dim * self.visible_pairs()

    def attention_kwargs(self) -> dict:
        return dict(
            causal=self.causal,
            softmax_scale=1.0 / math.sqrt(self.head_dim),
            local_window_size=None if self.window is None else (self.window, 0),
            return_lse=True,
        )


@dataclass
class Record:
    mode: str
    variant: str
    kind: str
    devices: int
    batch: int
    seq: int
    heads: int
    heads_kv: int
    head_dim: int
    dtype: str
    causal: bool
    window: int | None
    docs: int | None
    fwd_ms: float | None = None
    fwd_tflops: float | None = None
    bwd_ms: float | None = None
    bwd_tflops: float | None = None
    speedup_fwd: float | None = None  # one-device forward time / this mode's
    speedup_bwd: float | None = None
    max_abs_err: dict[str, float] = field(default_factory=dict)  # o, lse, dq, dk, dv
    tol: dict[str, float] = field(default_factory=dict)
    ok: bool | None = None
    # In the compiled forward program of one call: jax_fa4 forward kernel calls and collectives.
    hlo: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, mode: str, prob: Problem, devices: int) -> Record:
        p = asdict(prob)
        return cls(mode=mode, devices=devices, **p)


class Unsupported(Exception):
    """The library refused the combination (a ValueError/NotImplementedError while tracing)."""


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def _timed(fn: Callable, args: tuple, repeats: int) -> tuple[float, object]:
    """(median seconds of `repeats` runs, the output of the first, warm-up, run)."""
    first = jax.block_until_ready(fn(*args))  # compiled already; warms up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), first


def _vjp(attn: Callable, q, k, v, ct, extra):
    """(o, lse, dq, dk, dv) of one call, pulled back with the cotangent pair ct = (do, dlse)."""
    (o, lse), pull = jax.vjp(lambda q, k, v: attn(q, k, v, *extra), q, k, v)
    return (o, lse, *pull(ct))


def _fwd_chain(attn: Callable, n: int) -> Callable:
    """n calls, each on the previous one's output; returns (last o, the first call's (o, lse))."""

    def chain(q, k, v, *extra):
        first = None
        for _ in range(n):
            o, lse = attn(q, k, v, *extra)
            first = (o, lse) if first is None else first
            q = o
        return q, first

    return chain


def _fwd_bwd_chain(attn: Callable, n: int) -> Callable:
    """n vjp + pullback calls, each on q = o + dq of the previous one; returns (the last q, every
    dk and dv (outputs, so that no pullback is cut away), the first call's (dq, dk, dv))."""

    def chain(q, k, v, ct_o, ct_lse, *extra):
        dks, dvs, first = [], [], None
        for _ in range(n):
            o, _, dq, dk, dv = _vjp(attn, q, k, v, (ct_o, ct_lse), extra)
            first = (dq, dk, dv) if first is None else first
            dks.append(dk)
            dvs.append(dv)
            q = (o + dq).astype(q.dtype)
        return q, dks, dvs, first

    return chain


# ---------------------------------------------------------------------------------------------
# Running one mode: check against the reference, count the collectives, time
# ---------------------------------------------------------------------------------------------


@dataclass
class Setup:
    """One mode's program and placed operands.

    attn: (q, k, v, *extra) -> (o, lse), jit-able; args: (q, k, v); extra: (segment ids,) or ();
    ct: the cotangent pair (do, dlse), placed like (o, lse); back: turns an output (o, lse, dq,
    dk or dv; lse's sequence axis is 2) back into the natural order, as a NumPy array."""

    attn: Callable
    args: tuple
    extra: tuple
    ct: tuple
    back: Callable[[jax.Array, int], np.ndarray] = lambda x, _axis: np.asarray(x)


@dataclass
class Config:
    chain: int
    repeats: int
    bwd: bool


def _hlo_counts(text: str) -> dict[str, int]:
    """Forward kernel calls and collectives of a compiled program's HLO text."""
    counts = {"fwd_kernel_calls": len(re.findall(r'custom_call_target="jax_fa4_fwd_', text))}
    for op in ("collective-permute", "all-gather", "all-reduce", "all-to-all"):
        counts[op.replace("-", "_") + "s"] = len(re.findall(rf"\s{op}(?:-start)?\(", text))
    return counts


def _first_line(err: BaseException, n: int = 300) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {(text[0] if text else '')[:n]}"


def _compare(rec: Record, got: dict[str, np.ndarray], want: dict[str, np.ndarray], dtype: str):
    """Fills max_abs_err, tol and ok from the quantities present in both (module docstring)."""
    eps = float(jnp.finfo(jnp.dtype(dtype)).eps)
    eps32 = float(jnp.finfo(jnp.float32).eps)
    ulps = 16 if jnp.dtype(dtype).itemsize == 4 else 4
    ok = True
    for name in ("o", "lse", *GRADS):
        if name not in got or name not in want:
            continue
        x, x0 = np.asarray(got[name], np.float32), np.asarray(want[name], np.float32)
        finite = np.isfinite(x0)
        if not np.array_equal(np.isfinite(x), finite) or not np.array_equal(
            x[~finite], x0[~finite]
        ):
            err = float("inf")
        else:
            err = float(np.max(np.abs(x[finite] - x0[finite]), initial=0.0))
        scale = max(1.0, float(np.max(np.abs(x0[finite]), initial=0.0)))
        tol = ulps * eps * scale
        if name == "lse":
            tol = max(ulps * eps32 * scale, 4 * eps)
        rec.max_abs_err[name] = err
        rec.tol[name] = tol
        ok = ok and err <= tol
    rec.ok = ok


def _measure(
    rec: Record, s: Setup, prob: Problem, cfg: Config, ref: dict | None
) -> dict[str, np.ndarray]:
    """Runs one mode: forward and backward times, (o, lse) and the gradients in natural order
    (taken from the timed programs' first call; compared with `ref` unless this is the
    reference), and the compiled forward's kernel calls and collectives per call."""
    fwd_args = (*s.args, *s.extra)
    try:
        lowered = jax.jit(_fwd_chain(s.attn, cfg.chain)).lower(*fwd_args)
    except (ValueError, NotImplementedError) as err:
        raise Unsupported(_first_line(err)) from err
    fwd = lowered.compile()
    rec.hlo = {
        name: count // cfg.chain if count % cfg.chain == 0 else round(count / cfg.chain, 2)
        for name, count in _hlo_counts(fwd.as_text()).items()
    }
    t, (_, (o, lse)) = _timed(fwd, fwd_args, cfg.repeats)
    t /= cfg.chain
    rec.fwd_ms = t * 1e3
    rec.fwd_tflops = prob.fwd_flops() / t / 1e12
    out = {"o": s.back(o, 1), "lse": s.back(lse, 2)}
    if cfg.bwd:
        bwd_args = (*s.args, *s.ct, *s.extra)
        try:
            bwd = jax.jit(_fwd_bwd_chain(s.attn, cfg.chain)).lower(*bwd_args).compile()
        except NotImplementedError as err:
            rec.notes.append(f"backward: {_first_line(err, 200)}; gradients not checked")
            bwd = None
        if bwd is not None:
            t_all, (*_, grads) = _timed(bwd, bwd_args, cfg.repeats)
            out.update({name: s.back(g, 1) for name, g in zip(GRADS, grads, strict=True)})
            t_b = t_all / cfg.chain - t
            if t_b > 0:
                rec.bwd_ms = t_b * 1e3
                rec.bwd_tflops = 2.5 * prob.fwd_flops() / t_b / 1e12
            else:
                rec.notes.append("backward: fwd+bwd chain not slower than the forward (noise)")
    if ref is not None:
        _compare(rec, out, ref, prob.dtype)
        missing = sorted(ref.keys() - out.keys())
        if missing:
            rec.notes.append(f"not compared: {', '.join(missing)}")
    return out


# ---------------------------------------------------------------------------------------------
# Modes
# ---------------------------------------------------------------------------------------------


def _mesh(devices, name: str):
    return jax.make_mesh((len(devices),), (name,), axis_types=(AxisType.Auto,), devices=devices)


def _inputs(prob: Problem, seed: int = 0) -> dict[str, np.ndarray]:
    """q, k, v and the cotangents ct_o (like o) and ct_lse (float32, like lse): NumPy normals
    (host-side: no device program to compile per shape)."""
    rng = np.random.default_rng(seed)
    dt = jnp.dtype(prob.dtype)
    b, s, h, hkv, d = prob.batch, prob.seq, prob.heads, prob.heads_kv, prob.head_dim
    shapes = {"q": (b, s, h, d), "k": (b, s, hkv, d), "v": (b, s, hkv, d), "ct_o": (b, s, h, d)}
    out = {
        name: rng.standard_normal(shape, np.float32).astype(dt) for name, shape in shapes.items()
    }
    out["ct_lse"] = rng.standard_normal((b, h, s), np.float32)
    return out


def _attn(prob: Problem) -> Callable:
    kw = prob.attention_kwargs()

    def attn(q, k, v, *ids):
        return jax_fa4.attention(q, k, v, segment_ids=ids[0] if ids else None, **kw)

    return attn


def _place(
    prob: Problem, data: dict, sharding, lse_sharding=None, perm: Callable | None = None
) -> tuple[tuple, tuple, tuple]:
    """(q, k, v), (segment ids,) or (), (ct_o, ct_lse) put on `sharding` (ct_lse, whose sequence
    is axis 2, on `lse_sharding` if given), each first reordered by perm(x, sequence axis)."""
    perm = perm or (lambda x, axis: x)
    lse_sharding = lse_sharding or sharding
    ids = prob.segment_ids()
    qkv = tuple(jax.device_put(perm(data[n], 1), sharding) for n in "qkv")
    extra = () if ids is None else (jax.device_put(perm(ids, 1), sharding),)
    ct = (
        jax.device_put(perm(data["ct_o"], 1), sharding),
        jax.device_put(perm(data["ct_lse"], 2), lse_sharding),
    )
    return qkv, extra, ct


def _setup_one_device(prob: Problem, data: dict, device) -> Setup:
    return Setup(_attn(prob), *_place(prob, data, device))


def _setup_data_parallel(prob: Problem, data: dict, devices, rec: Record) -> Setup:
    sh = NamedSharding(_mesh(devices, "dp"), P("dp"))
    return Setup(_attn(prob), *_place(prob, data, sh))


def _setup_ring_shard_map(prob: Problem, data: dict, devices, rec: Record) -> Setup:
    n = len(devices)
    mesh = _mesh(devices, "sp")
    seq, lse_seq = P(None, "sp"), P(None, None, "sp")
    # Zig-zag order when causal without a window (balanced; the caller permutes the sequence
    # once, segment ids and cotangents included). With a window the ring runs in the contiguous
    # layout anyway (its skipped steps are those of the contiguous blocks).
    zz = prob.causal and prob.window is None and n > 1
    layout = "zigzag" if zz else "contiguous"
    kw = prob.attention_kwargs()

    def body(q, k, v, *ids):
        return jax_fa4.ring_attention(
            q,
            k,
            v,
            axis_name="sp",
            layout=layout,
            segment_ids=ids[0] if ids else None,
            **kw,
        )

    extra_specs = () if prob.segment_ids() is None else (seq,)
    ring = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(seq, seq, seq, *extra_specs),
        out_specs=(seq, lse_seq),
        check_vma=True,
    )

    def perm(x, axis):
        return jax_fa4.to_zigzag(x, n, axis=axis) if zz else x

    def back(x, axis):
        x = np.asarray(x)
        return jax_fa4.from_zigzag(x, n, axis=axis) if zz else x

    if zz:
        rec.notes.append("inputs in zig-zag order (jax_fa4.to_zigzag), results permuted back")
    if prob.window is not None:
        rec.notes.append(f"contiguous layout; per-device chunk {prob.seq // n}")
    placed = _place(prob, data, NamedSharding(mesh, seq), NamedSharding(mesh, lse_seq), perm)
    return Setup(ring, *placed, back)


def _setup_ring_jit(prob: Problem, data: dict, devices, rec: Record) -> Setup:
    # Plain jit, sequence sharded in natural order: the automatic partitioning's ring.
    mesh = _mesh(devices, "sp")
    if prob.causal and prob.window is None and len(devices) > 1:
        rec.notes.append("natural order: the ring moves chunks into zig-zag order itself")
    sh, lse_sh = NamedSharding(mesh, P(None, "sp")), NamedSharding(mesh, P(None, None, "sp"))
    return Setup(_attn(prob), *_place(prob, data, sh, lse_sh))


SETUPS = {
    "data-parallel": _setup_data_parallel,
    "ring-shard_map": _setup_ring_shard_map,
    "ring-jit": _setup_ring_jit,
}


def _note_collectives(rec: Record) -> None:
    """A note when the compiled program does not do what the mode is meant to do."""
    h = rec.hlo
    if rec.devices < 2 or not h:
        return
    if rec.mode.startswith("ring") and not h.get("collective_permutes"):
        rec.notes.append(
            f"no ring: the compiled forward has no collective-permute ({h.get('all_gathers', 0)} "
            "all-gathers): the sequence is gathered and every device computes the whole "
            "attention; exact, not a sequence split"
        )
    if rec.mode == "data-parallel" and any(v for k, v in h.items() if k != "fwd_kernel_calls"):
        rec.notes.append(f"data parallel with collectives: {h}")


def run_problem(prob: Problem, devices, counts: list[int], cfg: Config) -> list[Record]:
    """The one-device reference, then every mode of the problem's kind on the first N devices
    for every N in `counts`. A mode that fails or is refused is recorded and the next one runs.
    """
    data = _inputs(prob)
    base = Record.of("one-device", prob, 1)
    records = [base]
    if prob.window is not None and prob.window >= prob.seq - 1:
        base.notes.append(f"the window spans the whole sequence ({prob.seq}): the causal mask")
    try:
        ref = _measure(base, _setup_one_device(prob, data, devices[0]), prob, cfg, None)
        base.speedup_fwd = 1.0 if base.fwd_ms else None
        base.speedup_bwd = 1.0 if base.bwd_ms else None
    except Exception as err:  # noqa: BLE001 - report and go on
        base.ok = False
        base.notes.append(f"failed: {_first_line(err)}")
        traceback.print_exc()
        ref = None
    for n in counts:
        for mode in MODES[prob.kind]:
            rec = Record.of(mode, prob, n)
            records.append(rec)
            if ref is None:
                rec.ok = False
                rec.notes.append("not run: the one-device reference failed")
                continue
            try:
                setup = SETUPS[mode](prob, data, devices[:n], rec)
                _measure(rec, setup, prob, cfg, ref)
                _note_collectives(rec)
            except Unsupported as err:
                rec.ok = None
                rec.notes.append(f"unsupported by jax_fa4: {err}")
            except Exception as err:  # noqa: BLE001 - report and go on
                rec.ok = False
                rec.notes.append(f"failed: {_first_line(err)}")
                traceback.print_exc()
            if base.fwd_ms and rec.fwd_ms:
                rec.speedup_fwd = base.fwd_ms / rec.fwd_ms
            if base.bwd_ms and rec.bwd_ms:
                rec.speedup_bwd = base.bwd_ms / rec.bwd_ms
    return records


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def _fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def _ok(r: Record) -> str:
    return {None: "n/a", True: "yes", False: "NO"}[r.ok]


def _print_table(records: list[Record]) -> None:
    hdr = (
        f"{'variant':<8} {'mode':<14} {'dev':>3} {'b':>3} {'seq':>6} {'h/kv':>5} {'causal':>6} "
        f"{'win':>5} {'fwd ms':>8} {'x1dev':>5} {'bwd ms':>8} {'x1dev':>5} {'k/cp':>5} "
        + " ".join(f"{'err ' + n:>8}" for n in ("o", "lse", *GRADS))
        + " ok"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in records:
        err = " ".join(f"{_fmt(r.max_abs_err.get(n), '.1e'):>8}" for n in ("o", "lse", *GRADS))
        calls = f"{r.hlo.get('fwd_kernel_calls', '-')}/{r.hlo.get('collective_permutes', '-')}"
        print(
            f"{r.variant:<8} {r.mode:<14} {r.devices:>3} {r.batch:>3} {r.seq:>6} "
            f"{r.heads:>2}/{r.heads_kv:<2} {str(r.causal):>6} {_fmt(r.window, 'd'):>5} "
            f"{_fmt(r.fwd_ms, '.3f'):>8} {_fmt(r.speedup_fwd, '.2f'):>5} "
            f"{_fmt(r.bwd_ms, '.3f'):>8} {_fmt(r.speedup_bwd, '.2f'):>5} {calls:>5} {err} "
            f"{_ok(r)}"
        )
        for note in r.notes:
            print(f"{'':<10}note: {note}")
    print(
        "x1dev: one device's time / this one's; k/cp: jax_fa4 forward kernel calls / "
        "collective-permutes per call in the compiled forward (a device's program); err: max "
        "|difference| from one device"
    )


def _print_scaling(records: list[Record], counts: list[int]) -> None:
    """Speed-up over one device, forward / backward, one column per device count."""
    print("\nspeed-up over one device (fwd / bwd; ideal = devices), ok marks:")
    hdr = f"{'variant':<8} {'causal':>6} {'mode':<14} " + " ".join(
        f"{str(n) + ' dev':>13}" for n in counts
    )
    print(hdr)
    print("-" * len(hdr))
    rows: dict[tuple, dict[int, Record]] = {}
    for r in records:
        if r.mode != "one-device":
            rows.setdefault((r.variant, r.causal, r.mode), {})[r.devices] = r
    for (variant, causal, mode), by_n in rows.items():
        cells = []
        for n in counts:
            r = by_n.get(n)
            cell = "" if r is None else f"{_fmt(r.speedup_fwd)}/{_fmt(r.speedup_bwd)}"
            if r is not None and r.ok is not True:
                cell += "?" if r.ok is None else "!"
            cells.append(f"{cell:>13}")
        print(f"{variant:<8} {str(causal):>6} {mode:<14} " + " ".join(cells))
    print("(! : differs from one device or failed; ? : not checked or refused; see the notes)")


def _device_counts(spec: str | None, n: int) -> list[int]:
    if spec:
        counts = sorted({int(c) for c in spec.split(",") if c.strip()})
        bad = [c for c in counts if not 1 <= c <= n]
        if bad:
            raise SystemExit(f"--device-counts {bad}: this machine has {n} devices")
        return counts
    counts = {n}
    c = 2
    while c <= n:
        counts.add(c)
        c *= 2
    return sorted(counts)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def problems(args: argparse.Namespace, cpu: bool, counts: list[int]) -> list[Problem]:
    """Every problem of the requested variants: a data-parallel one and a ring one each, fixed
    across the device counts (batch and sequence divisible by every count; zig-zag: 2x)."""
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    dtype = args.dtype or ("float32" if cpu else "bfloat16")
    heads = args.heads or (4 if cpu else 16)
    head_dim = args.head_dim or (32 if cpu else 128)
    top, lcm = max(counts), math.lcm(*counts)
    dp_b = _round_up((args.dp_batch_per_device or (1 if cpu else 2)) * top, lcm)
    dp_seq = args.dp_seq or (256 if cpu else 4096)
    ring_seq = _round_up((args.ring_seq_per_device or (64 if cpu else 4096)) * top, 2 * lcm)
    window = args.window if args.window is not None else (48 if cpu else 4096)
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    gqa_kv = args.kv_heads or max(1, heads // 4)
    out = []
    for variant in variants:
        kv, win, docs, cs = heads, None, None, causals
        if variant == "gqa":
            kv = gqa_kv
        elif variant == "window":
            win, cs = window, (True,)
        elif variant == "segments":
            docs, cs = args.docs, (True,)
        for causal in cs:
            for kind, b, s in (("dp", dp_b, dp_seq), ("ring", 1, ring_seq)):
                out.append(
                    Problem(kind, variant, b, s, heads, kv, head_dim, dtype, causal, win, docs)
                )
    return out


def main() -> int:
    args = ARGS
    devices = jax.devices()
    if args.devices:
        devices = devices[: args.devices]
    platform = devices[0].platform
    cpu = platform == "cpu"
    counts = _device_counts(args.device_counts, len(devices))
    cfg = Config(
        chain=args.chain or (1 if cpu else 4),
        repeats=args.repeats or (3 if cpu else 5),
        bwd=not args.no_backward,
    )
    print(
        f"jax {jax.__version__}, {len(devices)} x {devices[0].device_kind} ({platform}); device "
        f"counts {counts}; jax_fa4 automatic partitioning "
        f"{'on' if jax_fa4.sharding.ENABLED else 'off'}"
    )
    t0 = time.perf_counter()
    records: list[Record] = []
    failed = False
    for prob in problems(args, cpu, counts):
        try:
            records += run_problem(prob, devices, counts, cfg)
        except Exception:  # noqa: BLE001 - report and go on
            failed = True
            print(f"{prob} failed:\n{traceback.format_exc()}", file=sys.stderr)
    _print_table(records)
    _print_scaling(records, counts)
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        out = {
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "jax": jax.__version__,
            "platform": platform,
            "device_kind": devices[0].device_kind,
            "devices": len(devices),
            "device_counts": counts,
            "argv": sys.argv[1:],
            "records": [asdict(r) for r in records],
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.json}")
    bad = [f"{r.variant}/{r.mode}/{r.devices}" for r in records if r.ok is False]
    if bad:
        print(f"failed or different from one device: {bad} (see the notes above)")
    return 1 if (bad or failed) else 0


if __name__ == "__main__":
    sys.exit(main())
