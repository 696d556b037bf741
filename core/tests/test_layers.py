"""The layer contract of core, checked on the source: rooms in layers, no cycle between rooms, and own
modules imported at the top of a module unless that would load a heavy library too early.

A *room* is a top-level module (``videorl/episode.py``) or package (``videorl/actor/``) of core. Every
import counts: module-level, function-local and ``TYPE_CHECKING`` ones alike, since an annotation that
names a higher room is a dependency on it all the same. A room may import rooms of its own layer or of
lower ones, never a higher one, and the rooms' import graph has no cycle.

An import of an own module inside a function is allowed only when the module it names loads a heavy
library when imported (torch, vllm, ray, transformers, ... — :data:`HEAVY`), directly or through the own
modules it imports at its top: deferring it keeps ``videorl --help``, the plugin listing and the light
paths free of them. Every other own import is at the top of the module, where the reader sees it, or
is listed in :data:`LOCAL_ALLOWED` with the reason.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
TOP = "videorl"

#: Bottom to top. Each line: the rooms of one layer, and what the layer is.
LAYERS: list[set[str]] = [
    # vocabulary and plumbing: errors, options, files, registries, the plugin manager, the mesh, timing
    {
        "errors",
        "option",
        "atomic",
        "registry",
        "hub",
        "hookspecs",
        "plugins",
        "workers",
        "timing",
        "parallel",
        "devices",
        "packed_attention",
        "benchmark",
    },
    # the data path: frames and their cache, dataset rows, prompt templates, answer reading
    {"media", "data", "prompts", "answers"},
    # what a model sees and an engine returns
    {"model_inputs", "alignment", "packing", "generation", "shared_vision"},
    # model families
    {"backend"},
    # rewards, the config schema, encoded prompts, episodes
    {"rewards", "config", "encoding", "episode", "prompt_length", "tools"},
    # the roles of a step, and the run's artifacts
    {"algorithms", "rollout", "actor", "runs"},
    # evaluation and diagnostics (they never import training)
    {"eval", "diagnostics"},
    # the training loop, its local driver and the composition root
    {"train"},
    # training on Ray
    {"cluster"},
    # the command line, the demo, the public API and the contract kit
    {"commands", "demo", "demo_seek", "cli", "builtin", "api", "testing"},
]

HEAVY = {"torch", "vllm", "ray", "transformers", "peft", "matplotlib", "pyarrow", "av", "numpy", "PIL"}

#: ``(module, imported own module)`` pairs allowed inside a function although the target is light,
#: each with its reason. None today: every light own import is at the top of its module.
LOCAL_ALLOWED: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    return {
        ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (SRC / TOP).rglob("*.py")
    }


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The own module ``name`` names (``from a.b import c`` may name the module ``a.b.c``)."""
    parts = name.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) if parts else None


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else TOP


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return []


def _edges() -> dict[tuple[str, str], list[str]]:
    """``(room, room it imports) -> ["module:line", ...]`` over every import of every module."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _imported(node):
                own = _resolve(target) if target.split(".")[0] == TOP else None
                if own is None or own == TOP:
                    continue
                a, b = _room(name), _room(own)
                if a != b and a != TOP:
                    edges[(a, b)].append(f"{name}:{node.lineno}")
    return edges


def _layer(room: str) -> int:
    found = [i for i, rooms in enumerate(LAYERS) if room in rooms]
    assert len(found) == 1, f"room {room!r} is in {len(found)} layers: place it in LAYERS (once)"
    return found[0]


def test_every_room_has_one_layer() -> None:
    rooms = {_room(m) for m in MODULES} - {TOP}
    for room in sorted(rooms):
        _layer(room)
    listed = set().union(*LAYERS)
    assert not listed - rooms, f"LAYERS names rooms that do not exist: {sorted(listed - rooms)}"


def test_no_room_imports_a_higher_one() -> None:
    upward = [
        f"{a} (layer {_layer(a)}) -> {b} (layer {_layer(b)}) at {', '.join(where[:3])}"
        for (a, b), where in sorted(_edges().items())
        if _layer(b) > _layer(a)
    ]
    assert not upward, "imports that climb a layer:\n" + "\n".join(upward)


def test_no_cycle_between_rooms() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in _edges():
        graph[a].add(b)
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, f"rooms that import each other (through any path): {cycles}"


def test_evaluation_and_rollout_import_nothing_from_training() -> None:
    edges = _edges()
    for room in ("eval", "rollout", "actor", "runs"):
        assert (room, "train") not in edges, edges.get((room, "train"))
        assert (room, "cluster") not in edges, edges.get((room, "cluster"))


@functools.cache
def _top_imports(module: str) -> frozenset[str]:
    """What importing ``module`` imports: its top-level imports (not TYPE_CHECKING) and its parents."""
    out: set[str] = set()
    for node in ast.parse(MODULES[module].read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in [node] if isinstance(node, (ast.Import, ast.ImportFrom)) else ast.walk(node):
            if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.update(_imported(sub))
    parts = module.split(".")
    out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(out)


@functools.cache
def _heavy(module: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether importing ``module`` loads a :data:`HEAVY` library (through its own imports too)."""
    for name in _top_imports(module):
        if name.split(".")[0] in HEAVY:
            return True
        own = _resolve(name) if name.split(".")[0] == TOP else None
        if own and own != module and own not in seen and _heavy(own, seen | {module}):
            return True
    return False


def test_own_modules_are_imported_at_the_top_unless_heavy() -> None:
    found: list[tuple[str, str, str]] = []  # (module, own module it imports, where)
    for name, path in sorted(MODULES.items()):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                for target in _imported(node)[:1]:  # the statement's module
                    own = _resolve(target) if target.split(".")[0] == TOP else None
                    if own is not None and not _heavy(own):
                        found.append((name, own, f"{name}:{node.lineno} imports {own} inside {fn.name}()"))
    light = [where for name, own, where in found if (name, own) not in LOCAL_ALLOWED]
    assert not light, "own modules that load nothing heavy belong at the top:\n" + "\n".join(light)
    unused = set(LOCAL_ALLOWED) - {(name, own) for name, own, _ in found}
    assert not unused, f"LOCAL_ALLOWED lists imports that are no longer local: {sorted(unused)}"


def test_a_heavy_target_is_really_heavy() -> None:
    """The rule's premise, checked on two modules: the update loads torch, the errors module nothing."""
    assert _heavy("videorl.actor.update")
    assert not _heavy("videorl.errors")


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: Functions allowed over :data:`MAX_FUNCTION_LINES` (at most two), each with the reason.
LONG_FUNCTIONS: dict[str, str] = {
    "videorl.testing.backend.assert_backend_contract": (
        "the backend contract's checks in the order an author fixes them, each a few lines"
    ),
    "videorl.data.loaders.parse_row": "the row schema's fields in the order the docs list them",
}


def test_modules_and_functions_read_in_one_sitting() -> None:
    assert len(LONG_FUNCTIONS) <= 2
    long_modules, long_functions = [], set()
    for name, path in sorted(MODULES.items()):
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if function and (node.end_lineno or 0) - node.lineno + 1 > MAX_FUNCTION_LINES:
                long_functions.add(f"{name}.{node.name}")
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert long_functions <= set(LONG_FUNCTIONS), (
        f"functions over {MAX_FUNCTION_LINES} lines: {sorted(long_functions - set(LONG_FUNCTIONS))}"
    )
