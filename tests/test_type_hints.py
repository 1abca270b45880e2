"""Public functions carry complete type hints that name real types (issue 15, item 7).

Public: no leading underscore, in the module's ``__all__`` where it has one, and the public
methods (and ``__init__``/``__call__``) of the public classes.  Complete: every parameter but
``self``/``cls`` and the return.  The annotations are strings (``from __future__ import
annotations``), so a wrong name would only show in a type checker: each is evaluated here
with the module's ``if TYPE_CHECKING:`` imports run.
"""
from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Source folders and the package they are installed as (pyproject's package-dir).
PACKAGES = {"swdask": "swdask", "kernels": "swdask.kernels",
            "parquet_schemas": "swdask.parquet_schemas"}
#: Compiled by ``numba.cuda.jit(device=True)`` as well as ``@njit``: a CUDA device
#: function is typed by Numba from its arguments, and carries no annotations.
CUDA_DEVICE_FUNCTIONS = {
    "kernels/directions.py": {"border_gap", "decision", "walk_step"},
    "kernels/psse_math.py": {"philox", "fisher_yates", "write_copy", "gumbel_fit", "gumbel_sf",
                             "pair_significance"},
    "kernels/cuda/all_pairs.py": {"lowest_score"},
    "kernels/cuda/traceback.py": {"strip_columns"},
    "kernels/cpu/qgram.py": {"need_of", "merge_count", "token_bucket", "screen_passes"},
}


def _sources():
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix()


def _module_name(relative: str) -> str:
    folder, _, rest = relative.partition("/")
    parts = [PACKAGES[folder], *rest.removesuffix(".py").split("/")]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _public(tree: ast.Module, exported: list[str] | None):
    """``(qualified name, function node)`` of the public functions and methods (of those
    in ``exported``, the module's ``__all__``, where it has one)."""
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name.startswith("_") or (exported is not None and node.name not in exported):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        not member.name.startswith("_") or member.name in ("__init__", "__call__")):
                    yield f"{node.name}.{member.name}", member


def _missing(function: ast.FunctionDef) -> list[str]:
    args = function.args
    missing = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs
               if a.annotation is None and a.arg not in ("self", "cls")]
    missing += [f"*{a.arg}" for a in (args.vararg,) if a is not None and a.annotation is None]
    missing += [f"**{a.arg}" for a in (args.kwarg,) if a is not None and a.annotation is None]
    if function.returns is None:
        missing.append("return")
    return missing


@pytest.mark.parametrize("relative", list(_sources()))
def test_public_functions_have_type_hints(relative):
    tree = ast.parse((ROOT / relative).read_text(encoding="utf-8"))
    exported = getattr(importlib.import_module(_module_name(relative)), "__all__", None)
    excluded = CUDA_DEVICE_FUNCTIONS.get(relative, set())
    lacking = {name: missing for name, function in _public(tree, exported)
               if name not in excluded and (missing := _missing(function))}
    assert not lacking, f"{relative}: public functions without hints: {lacking}"


def _unresolved(relative: str) -> list[str]:
    """The annotations of a module that do not evaluate, with its type-only imports run."""
    tree = ast.parse((ROOT / relative).read_text(encoding="utf-8"))
    module = importlib.import_module(_module_name(relative))
    namespace = dict(vars(module))
    for node in ast.walk(tree):  # the type-only imports and aliases
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            exec(compile(ast.Module(body=node.body, type_ignores=[]), relative, "exec"),
                 namespace)
    wrong = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs]
            every += [a.annotation for a in (args.vararg, args.kwarg) if a is not None]
            for annotation in [*every, node.returns]:
                if annotation is None:
                    continue
                text = ast.unparse(annotation)
                try:
                    eval(text, namespace)  # the package's own annotations
                except Exception as exc:  # noqa: BLE001 - reported with the annotation
                    wrong.append(f"{relative}: {node.name}: {text}: {type(exc).__name__}: {exc}")
    return wrong


def test_type_hints_name_real_types():
    # In a process of its own without Numba's CUDA simulator: the hints name numba.cuda's
    # real classes (a dispatcher, a stream, a device array), which the simulator lacks.
    # Importing them needs no GPU.
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


if __name__ == "__main__":
    problems = [line for relative in _sources() for line in _unresolved(relative)]
    print("\n".join(problems))
    sys.exit(1 if problems else 0)
