"""jax.export of a function that calls jax_fa4: the README's recipe, on the CPU.

jax.export refuses custom calls without a compatibility guarantee unless they are named in
``disabled_checks``; serialization needs the ``flatbuffers`` package (in the test extra); and the
process that calls a deserialized function must import jax_fa4 first, which registers the FFI
handlers with XLA.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerance import case_key, random_qkv

import jax_fa4

pytest.importorskip("flatbuffers")  # jax.export's serializer; the test extra installs it

from jax import export  # noqa: E402

CHECKS = [export.DisabledSafetyCheck.custom_call(f"jax_fa4_{k}_cpu") for k in ("fwd", "bwd")]


def _fn():
    return jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, causal=True))


def _inputs():
    # GQA and seq_q != seq_k: 100 queries against 130 keys.
    return random_qkv(case_key("export"), 2, 100, 130, 4, 2, 32, 32, jnp.float32)


def test_export_without_disabled_checks_is_refused():
    """What the README's recipe works around: jax.export's generic custom-call error."""
    with pytest.raises(ValueError, match=r"custom calls whose targets have no compatibility"):
        export.export(_fn())(*_inputs())


def test_export_serialize_deserialize_call():
    q, k, v = _inputs()
    fn = _fn()
    exported = export.export(fn, disabled_checks=CHECKS)(q, k, v)
    assert "jax_fa4_fwd_cpu" in exported.mlir_module()
    blob = exported.serialize(vjp_order=1)
    restored = export.deserialize(blob)
    np.testing.assert_array_equal(np.asarray(restored.call(q, k, v)), np.asarray(fn(q, k, v)))

    # The serialized VJP (vjp_order=1) gives the same gradients as the direct call.
    def loss(f):
        return lambda q, k, v: jnp.sum(f(q, k, v) ** 2)

    got = jax.jit(jax.grad(loss(restored.call), argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(loss(fn), argnums=(0, 1, 2)))(q, k, v)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)


def test_deserialize_in_a_fresh_process(tmp_path):
    """The artifact runs in another interpreter that imports jax_fa4 before calling it."""
    q, k, v = _inputs()
    fn = _fn()
    path = tmp_path / "attention.jax_exported"
    path.write_bytes(export.export(fn, disabled_checks=CHECKS)(q, k, v).serialize())
    np.save(tmp_path / "want.npy", np.asarray(fn(q, k, v)))
    for name, x in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", np.asarray(x))
    code = textwrap.dedent(
        f"""
        import pathlib
        import numpy as np
        import jax_fa4  # registers the FFI handlers the deserialized program calls
        from jax import export

        d = pathlib.Path({str(tmp_path)!r})
        restored = export.deserialize(bytearray((d / "attention.jax_exported").read_bytes()))
        q, k, v = (np.load(d / f"{{n}}.npy") for n in "qkv")
        np.testing.assert_array_equal(np.asarray(restored.call(q, k, v)), np.load(d / "want.npy"))
        print("ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-4000:]
