"""Every Triton kernel variant the project can launch compiles for an H100 (sm_90) and fits its limits.

No GPU needed: :mod:`induce.devtools.compile_check` drives the models of the shipped configs (training in
fp32 and bf16 autocast, validation, parsing) and the span-count sweep of the parse lengths through the
Triton tier with a stand-in driver that records each launch instead of running it, then compiles the
distinct variants with ``triton.compile`` for ``GPUTarget("cuda", 90, 32)`` and reads their resources
from the cubins. It runs in a subprocess: the interpreter tests set ``TRITON_INTERPRET=1`` when pytest
imports them, and kernels decorated under the interpreter cannot be compiled. Triton's on-disk cache
(``TRITON_CACHE_DIR``, default ``~/.triton/cache``) keeps a second run to the driving and the lookups.

``pytest -s`` (or ``-rA``) shows the table: registers, stack frame (spills) and shared memory per variant.
The same table: ``python3 -m induce.devtools.compile_check``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def _triton_reason():
    try:
        import triton  # noqa: F401  (importing triton does not decorate the project's kernels)
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.runtime.jit import JITFunction  # noqa: F401
    except Exception as error:  # pragma: no cover - the pinned install has triton
        return f"{type(error).__name__}: {error}"
    return None


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    reason = _triton_reason()
    if reason is not None:
        pytest.skip(f"triton cannot be imported: {reason}")
    out = tmp_path_factory.mktemp("compile_check") / "variants.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-m", "induce.devtools.compile_check", "--json", str(out), "--quiet"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1500,
    )
    print(done.stdout)  # the table (pytest -s / -rA)
    assert out.is_file(), f"the compile check wrote no report (exit {done.returncode}):\n{done.stderr[-4000:]}"
    data = json.loads(out.read_text())
    data["returncode"], data["stdout"] = done.returncode, done.stdout
    return data


def test_every_variant_compiles_for_sm90_within_the_h100_limits(report):
    from induce.devtools.compile_check import problems

    failing = [f"{r['kernel']} [{r['constexprs']}; {r['dtypes']}] from {r['seen_in']}: {'; '.join(problems(r))}"
               for r in report["variants"] if problems(r)]
    assert not failing, "\n".join(failing)
    assert report["returncode"] == 0, report["stdout"][-2000:]


def test_every_kernel_is_covered(report):
    """Every ``*_kernel`` of the Triton tier was launched by some workload, and every kernel of the
    training steps by a bf16 autocast step too (whatever dtypes the model gave it there)."""
    import ast

    names = set()
    for module in ("recurrent/triton_impl.py", "recurrent/triton_span.py", "pcfg/lowrank_triton.py",
                   "pcfg/dense_triton.py"):
        tree = ast.parse((REPO / "induce" / "kernels" / module).read_text())
        names |= {node.name for node in tree.body
                  if isinstance(node, ast.FunctionDef) and node.name.endswith("_kernel")}
    compiled = {r["kernel"] for r in report["variants"]}
    assert names <= compiled, f"kernels no workload launched: {sorted(names - compiled)}"
    trained = {r["kernel"] for r in report["variants"] if any(s.endswith("train fp32") for s in r["sightings"])}
    autocast = {r["kernel"] for r in report["variants"] if any(s.endswith("train bf16") for s in r["sightings"])}
    assert trained and trained <= autocast, f"not driven under bf16 autocast: {sorted(trained - autocast)}"


def test_every_shipped_config_is_driven(report):
    """Every shipped config, the neural PCFGs (no stream, no state: a path of their own) included."""
    from induce.devtools.compile_workloads import shipped_configs

    labels = [label for label, _ in shipped_configs()]
    assert any(cfg.model_name.endswith("pcfg") for _, cfg in shipped_configs())
    assert report["driven"] == labels


def test_the_parse_lengths_are_covered(report):
    """The span kernels of parsing were driven at every span count up to the default --max-length's."""
    from induce.devtools.compile_workloads import SPAN_COUNT_SWEEP
    from induce.inference.predict import DEFAULT_MAX_LENGTH

    assert set(range(1, DEFAULT_MAX_LENGTH + 3)) <= set(SPAN_COUNT_SWEEP)
    assert any(r["seen_in"].startswith("span-count sweep") for r in report["variants"])
