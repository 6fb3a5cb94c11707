"""Layering: the pure core (injection, the guard and its privilege rule, the policy model, profiles,
constants, settings, the flame graph renderer) imports neither the Kubernetes client nor the
server (nor Flask) nor webhook.kube nor the AdmissionReview wire layer (webhook.admission), not
even lazily or through another module. Offline `inject`, `guard check`, `render` and the unit
tests rely on that, and it keeps the core testable without a cluster."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Every module of webhook/inject, webhook/guard, webhook/render and webhook/schedules (a new one
# is covered without editing this list), plus these.
PURE_CORE = (
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
    *sorted(f"webhook.schedules.{p.stem}" for p in (ROOT / "webhook" / "schedules").glob("*.py")),
    "webhook.policy.api",
    "webhook.policy.model",
    "webhook.constants",
    "webhook.config",
    "webhook.profiles",
    "webhook.errors",
    "webhook.identity",
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


def test_profiles_are_data() -> None:
    # A profile is parsed data; whether it needs a grant is the guard's question
    # (webhook.guard.privilege). profiles -> policy.privilege -> guard made config, profiles,
    # policy, guard and inject depend on each other (issue 27, item 3).
    assert forbidden_imports(
        "webhook.profiles", forbidden=("webhook.policy", "webhook.guard", "webhook.inject")
    ) == []


# The package cycles there are (as sorted package names); any other fails the check below.
KNOWN_PACKAGE_CYCLES = {
    # Issue 27 item 2 removes it (the profile formats move to webhook/stacks/, so render no
    # longer imports results): delete the entry then.
    ("render", "results"),
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
