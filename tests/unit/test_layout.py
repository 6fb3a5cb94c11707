"""Layering: the pure core (the wire types, injection, the guard and its privilege rule, the policy
model, profiles, settings, the flame graph renderer, the profile formats) imports neither the
Kubernetes client nor the server (nor Flask) nor webhook.kube nor the AdmissionReview layer
(webhook.admission), not even lazily or through another module. Offline `inject`, `guard
check`, `render` and the unit tests rely on that, and it keeps the core testable without a
cluster. At the bottom, webhook.wire imports nothing of the project outside itself.

The profile formats (webhook.stacks) import nothing else of the project's. The renderer
(webhook.render) stands on them alone (and on webhook.wire.jsonio, a leaf that imports nothing
of the project's): not on the results service that also uses them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Every module of webhook/wire (the bottom layer: shapes, the parsed pod, status, identity,
# image references, time, JSON, constants, exit codes).
WIRE = tuple(sorted(f"webhook.wire.{p.stem}" for p in (ROOT / "webhook" / "wire").glob("*.py")))
# Every module of webhook/wire, webhook/inject, webhook/guard, webhook/render, webhook/stacks and
# webhook/schedules (a new one is covered without editing this list), plus these.
PURE_CORE = (
    *WIRE,
    *sorted(f"webhook.inject.{p.stem}" for p in (ROOT / "webhook" / "inject").glob("*.py")),
    *sorted(f"webhook.guard.{p.stem}" for p in (ROOT / "webhook" / "guard").glob("*.py")),
    "webhook.guard.pss",
    *sorted(
        f"webhook.guard.pss.{p.stem}"
        for p in (ROOT / "webhook" / "guard" / "pss").glob("check_*.py")
    ),
    "webhook.guard.pss.messages",
    "webhook.guard.pss.model",
    "webhook.guard.pss.pod",
    "webhook.guard.pss.registry",
    *sorted(f"webhook.render.{p.stem}" for p in (ROOT / "webhook" / "render").glob("*.py")),
    *sorted(f"webhook.stacks.{p.stem}" for p in (ROOT / "webhook" / "stacks").glob("*.py")),
    *sorted(f"webhook.schedules.{p.stem}" for p in (ROOT / "webhook" / "schedules").glob("*.py")),
    "webhook.policy.api",
    "webhook.policy.model",
    "webhook.config",
    "webhook.profiles",
    "webhook.errors",
)
FORBIDDEN = ("kubernetes", "webhook.server", "webhook.kube", "webhook.admission", "flask")


def module_file(module: str, root: Path = ROOT) -> Path | None:
    base = root / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports anywhere (top level, functions, TYPE_CHECKING blocks and
    importlib.import_module("literal") calls), including the packages on the way."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            # `from webhook.x import y` may import the submodule webhook.x.y
            names += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if module_file(f"{node.module}.{alias.name}", root)
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        for name in names:
            parts = name.split(".")
            found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return found


def forbidden_imports(
    start: str, root: Path = ROOT, forbidden: tuple[str, ...] = FORBIDDEN
) -> list[str]:
    """Import chains from `start` that reach a `forbidden` module, e.g. 'a -> b -> kubernetes'."""
    chains: set[str] = set()
    seen: set[str] = set()
    stack: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
    while stack:
        module, chain = stack.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_file(module, root)
        if path is None:
            continue
        for imported in sorted(imported_modules(path, root)):
            hit = [f for f in forbidden if imported == f or imported.startswith(f + ".")]
            if hit:
                chains.add(" -> ".join((*chain, hit[0])))
            elif imported.startswith("webhook"):
                stack.append((imported, (*chain, imported)))
    return sorted(chains)


@pytest.mark.parametrize("module", PURE_CORE)
def test_pure_core_imports_no_client_and_no_server(module: str) -> None:
    assert module_file(module) is not None, f"{module} moved: update PURE_CORE"
    assert forbidden_imports(module) == []


def outside_wire(module: str, root: Path = ROOT) -> list[str]:
    """The project's modules outside webhook.wire that `module` imports (anywhere in it)."""
    path = module_file(module, root)
    assert path is not None, f"{module} moved: update WIRE"
    return sorted(
        m for m in imported_modules(path, root)
        if m.startswith("webhook.") and m != "webhook.wire" and not m.startswith("webhook.wire.")
    )


@pytest.mark.parametrize("module", WIRE)
def test_the_wire_layer_imports_nothing_above_it(module: str) -> None:
    assert outside_wire(module) == []


def test_the_wire_check_sees_an_import_from_above(tmp_path: Path) -> None:
    package = tmp_path / "webhook"
    (package / "wire").mkdir(parents=True)
    (package / "inject").mkdir()
    for init in (package / "__init__.py", package / "wire" / "__init__.py",
                 package / "inject" / "__init__.py"):
        init.write_text("")
    (package / "inject" / "decision.py").write_text("")
    (package / "wire" / "ok.py").write_text("from webhook.wire import other\n")
    (package / "wire" / "other.py").write_text(
        "def later():\n    from webhook.inject import decision\n"
    )
    assert outside_wire("webhook.wire.ok", tmp_path) == []
    assert outside_wire("webhook.wire.other", tmp_path) == [
        "webhook.inject", "webhook.inject.decision"
    ]


def test_the_check_sees_lazy_and_indirect_imports(tmp_path: Path) -> None:
    package = tmp_path / "webhook"
    (package / "inject").mkdir(parents=True)
    for init in (package / "__init__.py", package / "inject" / "__init__.py"):
        init.write_text("")
    (package / "inject" / "core.py").write_text("from webhook.inject import helper\n")
    (package / "inject" / "helper.py").write_text(
        "def later():\n    from webhook.kube import client\n"
    )
    (package / "inject" / "lazy.py").write_text(
        "import importlib\nimportlib.import_module('kubernetes.client')\n"
    )
    assert forbidden_imports("webhook.inject.core", tmp_path) == [
        "webhook.inject.core -> webhook.inject.helper -> webhook.kube"
    ]
    assert forbidden_imports("webhook.inject.lazy", tmp_path) == [
        "webhook.inject.lazy -> kubernetes"
    ]


def import_cycles(modules: tuple[str, ...], root: Path = ROOT) -> list[list[str]]:
    """Cycles in the import graph of `modules` and the webhook modules they reach (every
    import counts, TYPE_CHECKING ones too: a cycle there is still two modules that need each
    other's definitions)."""
    graph: dict[str, set[str]] = {}
    pending = list(modules)
    while pending:
        module = pending.pop()
        if module in graph:
            continue
        path = module_file(module, root)
        found = imported_modules(path, root) if path else set()
        edges = {m for m in found if m.startswith("webhook.")}
        graph[module] = {
            m
            for m in edges
            if module_file(m, root)
            and m != module
            and not (root / m.replace(".", "/") / "__init__.py").is_file()
        }
        pending.extend(graph[module])
    return cycles_of(graph)


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first walk of `graph` (node -> the nodes it imports) meets, each as
    its path back to where it started."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def project_imports(start: str, root: Path = ROOT) -> dict[str, tuple[str, ...]]:
    """Every webhook module `start` reaches through its imports (lazy and indirect ones too),
    each with the chain that reaches it."""
    reached: dict[str, tuple[str, ...]] = {}
    stack: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
    while stack:
        module, chain = stack.pop()
        if module in reached:
            continue
        reached[module] = chain
        path = module_file(module, root)
        if path is None:
            continue
        for imported in sorted(imported_modules(path, root)):
            if imported.startswith("webhook.") and imported not in reached:
                stack.append((imported, (*chain, imported)))
    return reached


def imports_outside(start: str, allowed: tuple[str, ...], root: Path = ROOT) -> list[str]:
    """Import chains from `start` to a webhook module that is not under one of `allowed`."""
    return sorted(
        " -> ".join(chain)
        for module, chain in project_imports(start, root).items()
        if not any(module == a or module.startswith(a + ".") for a in allowed)
    )


STACKS = sorted(f"webhook.stacks.{p.stem}" for p in (ROOT / "webhook" / "stacks").glob("*.py"))
RENDER = sorted(f"webhook.render.{p.stem}" for p in (ROOT / "webhook" / "render").glob("*.py"))
LEAVES = ("webhook.wire.jsonio",)  # imported by the renderer: they import nothing of the project's
# The packages on the way to a leaf: importing one runs only its __init__, which imports nothing.
LEAF_PACKAGES = ("webhook.wire",)


@pytest.mark.parametrize("module", STACKS)
def test_stacks_import_nothing_of_the_project_above_them(module: str) -> None:
    assert imports_outside(module, ("webhook.stacks",)) == []


@pytest.mark.parametrize("module", RENDER)
def test_the_renderer_imports_only_the_stacks(module: str) -> None:
    outside = imports_outside(module, ("webhook.render", "webhook.stacks", *LEAVES))
    assert [chain for chain in outside if chain.rsplit(" -> ", 1)[-1] not in LEAF_PACKAGES] == []


@pytest.mark.parametrize("package", LEAF_PACKAGES)
def test_the_packages_on_the_way_to_a_leaf_import_nothing(package: str) -> None:
    assert list(project_imports(package)) == [package]


@pytest.mark.parametrize("module", LEAVES)
def test_the_renderers_leaves_import_nothing_of_the_project(module: str) -> None:
    assert imports_outside(module, (module,)) == []


# The results service and the controller are peers (each its own Deployment and
# ServiceAccount): what both need (KubeApi, post_event) lives in kube/, below both.
RESULTS = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for p in (ROOT / "webhook" / "results").rglob("*.py"))


@pytest.mark.parametrize("module", RESULTS)
def test_the_results_service_reaches_no_controller_module(module: str) -> None:
    reached = project_imports(module)
    assert [" -> ".join(chain) for name, chain in reached.items()
            if name.startswith("webhook.controller")] == []


def test_the_import_rules_see_lazy_and_indirect_imports(tmp_path: Path) -> None:
    package = tmp_path / "webhook"
    (package / "stacks").mkdir(parents=True)
    (package / "results").mkdir()
    for init in (package / "__init__.py", package / "stacks" / "__init__.py",
                 package / "results" / "__init__.py"):
        init.write_text("")
    (package / "stacks" / "pprof.py").write_text("from webhook.stacks import folded\n")
    (package / "stacks" / "folded.py").write_text(
        "def later():\n    from webhook.results import store\n"
    )
    (package / "results" / "store.py").write_text("")
    assert imports_outside("webhook.stacks.pprof", ("webhook.stacks",), tmp_path) == [
        "webhook.stacks.pprof -> webhook.stacks.folded -> webhook.results",
        "webhook.stacks.pprof -> webhook.stacks.folded -> webhook.results.store",
    ]


def test_the_pure_core_has_no_import_cycles() -> None:
    # The profile model and the privilege rule imported each other (issue 17, item 7).
    assert import_cycles(PURE_CORE) == []


def test_the_cycle_check_finds_a_type_checking_cycle(tmp_path: Path) -> None:
    package = tmp_path / "webhook"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from webhook.b import f\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from webhook.a import A\n"
    )
    assert import_cycles(("webhook.a",), tmp_path) == [["webhook.a", "webhook.b", "webhook.a"]]


# The session subcommands: one module each, sharing only `common` (issue 27: `sessions` and
# `trap` imported each other, and trap the private `_run`).
SESSION_COMMANDS = "webhook.commands.sessions"


def sibling_imports(package: str, root: Path = ROOT) -> list[str]:
    """'a -> b' for each module a of `package` that reaches its sibling b, except the siblings'
    `common`; `common` and the package's __init__ reach none."""
    directory = root / package.replace(".", "/")
    modules = sorted(f"{package}.{p.stem}" for p in directory.glob("*.py") if p.stem != "__init__")
    found: list[str] = []
    for module in [package, *modules]:
        allowed = {f"{package}.common"} if module not in (package, f"{package}.common") else set()
        reached = set(project_imports(module, root))
        found += [f"{module} -> {m}" for m in modules if m in reached - allowed - {module}]
    return found


def test_the_session_commands_import_only_common() -> None:
    assert module_file(f"{SESSION_COMMANDS}.common") is not None, "moved: update SESSION_COMMANDS"
    assert sibling_imports(SESSION_COMMANDS) == []


def test_the_sibling_check_sees_lazy_and_indirect_imports(tmp_path: Path) -> None:
    package = tmp_path / "webhook" / "commands"
    package.mkdir(parents=True)
    for init in ("webhook/__init__.py", "webhook/commands/__init__.py"):
        (tmp_path / init).write_text("")
    (package / "common.py").write_text("")
    (package / "a.py").write_text("from webhook.commands import common\n")
    (package / "b.py").write_text("def later():\n    from webhook import helper\n")
    (tmp_path / "webhook" / "helper.py").write_text("from webhook.commands import a\n")
    assert sibling_imports("webhook.commands", tmp_path) == ["webhook.commands.b -> "
                                                             "webhook.commands.a"]


# Files named alike in the CLI, the controller, the toolset's executables and CI (the `trap`,
# `flamegraph` and `run` of two trees each, issue 27): a name says which file it is. `-` and `_`
# count as one (results-agent, results_agent); packages' __init__ are not names.
NAMED_TREES = (("webhook/commands", "**/*.py"), ("webhook/controller", "**/*.py"),
               ("toolset/bin", "*"), (".ci", "*"))


def file_names(root: Path = ROOT) -> dict[str, list[str]]:
    """Each name (a file's stem, `-` as `_`) -> the files of NAMED_TREES that have it."""
    names: dict[str, list[str]] = {}
    for tree, pattern in NAMED_TREES:
        for path in sorted((root / tree).glob(pattern)):
            if path.is_file() and path.stem != "__init__" and "__pycache__" not in path.parts:
                name = path.stem.replace("-", "_")
                names.setdefault(name, []).append(str(path.relative_to(root)))
    return names


def test_command_controller_toolset_and_ci_file_names_are_unique() -> None:
    repeated = {name: paths for name, paths in file_names().items() if len(paths) > 1}
    assert repeated == {}, "rename one: these names each say two files"


def test_no_webhook_module_is_named_like_a_toolset_executable_or_a_ci_script() -> None:
    modules = {p.stem.replace("-", "_") for p in (ROOT / "webhook").rglob("*.py")}
    scripts = {p.name.replace("-", "_"): str(p.relative_to(ROOT))
               for tree in ("toolset/bin", ".ci") for p in (ROOT / tree).iterdir() if p.is_file()}
    assert sorted(path for name, path in scripts.items() if name in modules) == []


def test_profiles_are_data() -> None:
    # A profile is parsed data; whether it needs a grant is the guard's question
    # (webhook.guard.privilege). profiles -> policy.privilege -> guard made config, profiles,
    # policy, guard and inject depend on each other (issue 27, item 3).
    assert forbidden_imports(
        "webhook.profiles", forbidden=("webhook.policy", "webhook.guard", "webhook.inject")
    ) == []


# The package cycles there are (as sorted package names); any other fails the check below.
KNOWN_PACKAGE_CYCLES = {
    # The pure core's three peers, no module cycle among them: policy asks the guard whether a
    # profile needs a grant (guard.privilege), the guard rebuilds the toolset it verifies with
    # the injector's builders (guard.toolset -> inject.sidecar, inject.attach), and the
    # injector asks the policy through its contract (inject.pipeline -> policy.api).
    ("guard", "inject", "policy"),
}


def package_of(module: str) -> str:
    """`webhook.guard.pss.pod` -> `guard`; a top-level module is its own (`profiles`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_cycles(root: Path = ROOT) -> list[list[str]]:
    """Cycles among the packages of webhook/ (and its top-level modules): an import from one
    module of package A of a module of package B is an edge A -> B."""
    graph: dict[str, set[str]] = {}
    for path in sorted((root / "webhook").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        source = package_of(module)
        graph.setdefault(source, set()).update(
            package_of(m)
            for m in imported_modules(path, root)
            if m.startswith("webhook.") and package_of(m) != source
        )
    return cycles_of(graph)


def test_the_packages_of_webhook_have_no_import_cycles() -> None:
    cycles = [
        c for c in package_cycles() if tuple(sorted(set(c))) not in KNOWN_PACKAGE_CYCLES
    ]
    assert cycles == []


def test_the_package_cycle_check_finds_one(tmp_path: Path) -> None:
    package = tmp_path / "webhook"
    for name in ("a", "b"):
        (package / name).mkdir(parents=True)
        (package / name / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "a" / "x.py").write_text("from webhook.b import y\n")
    (package / "b" / "y.py").write_text("def later():\n    from webhook.a import x\n")
    assert package_cycles(tmp_path) == [["a", "b", "a"]]
