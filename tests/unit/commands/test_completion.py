"""`sidecar-debug completion bash|zsh|fish`, run in the real shells: the script is sourced and
asked to complete, as a user's TAB would (bash: the function with COMP_WORDS set, after
`complete -p`; zsh: through its bashcompinit's compgen -F, as its TAB does; fish:
`complete -C`). What it offers comes from the argparse tree, so a new option completes without
editing the script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.commands import completion
from webhook.commands.cli import build_parser

CLI = [sys.executable, "-m", "webhook.commands.cli"]


def script(shell: str, tmp_path: Path) -> Path:
    result = subprocess.run([*CLI, "completion", shell], capture_output=True, text=True,
                            timeout=60, check=True)
    path = tmp_path / f"completion.{shell}"
    path.write_text(result.stdout)
    return path


def shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:  # Debian's bash is always there; zsh and fish: `apt-get install zsh fish`
        pytest.skip(f"{name} is not installed")
    return found


BASH_ASK = """
source {script}
complete -p sidecar-debug kubectl-sidecar_debug
ask() {{
    COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMPREPLY=()
    _sidecar_debug
    echo "$*|${{COMPREPLY[*]}}"
}}
"""

# (the words typed, the last one being completed; what is offered)
CASES = [
    (["sidecar-debug", "gu"], "guard"),
    (["sidecar-debug", "guard", ""], "check"),
    (["sidecar-debug", "guard", "check", "--le"], "--level"),
    (["sidecar-debug", "guard", "check", "--level", ""], "baseline restricted"),
    (["sidecar-debug", "guard", "check", "--level", "r"], "restricted"),
    (["sidecar-debug", "inject", "-o", ""], "yaml json"),
    (["sidecar-debug", "results", "list", "-o", "y"], "yaml"),
    (["sidecar-debug", "completion", ""], "bash zsh fish"),
    (["kubectl-sidecar_debug", "policy", ""], "check explain schema"),
    (["sidecar-debug", "-n", "x", "certs", "ge"], "generate"),
    (["sidecar-debug", "inject", "-f", "man"], "manifests"),  # a directory here
    (["sidecar-debug", "inject", "-f", "manifests/a"], "manifests/app.yaml"),
    (["sidecar-debug", "results", "list", "--dir", "ma"], "manifests"),
    (["sidecar-debug", "doctor", "--j"], ""),  # --json is deprecated: not offered
]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "app.yaml").write_text("kind: Pod\n")
    return tmp_path


def test_bash_completes_commands_options_choices_and_files(workdir: Path) -> None:
    lines = [BASH_ASK.format(script=script("bash", workdir))]
    lines += ["ask " + " ".join(f"'{w}'" for w in words) for words, _ in CASES]
    result = subprocess.run([shell("bash"), "--norc", "-c", "\n".join(lines)],
                            capture_output=True, text=True, timeout=60, cwd=workdir)
    assert result.returncode == 0, result.stderr
    output = result.stdout.splitlines()
    assert output[:2] == ["complete -F _sidecar_debug sidecar-debug",
                          "complete -F _sidecar_debug kubectl-sidecar_debug"]
    assert output[2:] == [f"{' '.join(words)}|{offered}" for words, offered in CASES]
    assert result.stderr == ""


def test_zsh_completes_through_bashcompinit(workdir: Path) -> None:
    # zsh's compgen leaves the prefix match to compadd: what the function offers in context is
    # compared as a set, filtered by the prefix typed, as compadd does.
    lines = [
        "autoload -U compinit && compinit -u -d ./zcompdump",
        f"source {script('zsh', workdir)}",
        'print -r -- "$_comps[sidecar-debug]|$_comps[kubectl-sidecar_debug]"',
        "ask() { local -a words COMP_WORDS; local CURRENT=$# COMP_CWORD; words=(\"$@\");",
        "  COMP_WORDS=(\"$@\"); (( COMP_CWORD = CURRENT - 1 ));",
        "  print -r -- \"$*|${(j: :)${(f)$(compgen -F _sidecar_debug -- ${words[CURRENT]})}}\"; }",
    ]
    cases = [(w, o) for w, o in CASES if not w[-1].startswith(("man", "ma"))]
    lines += ["ask " + " ".join(f"'{w}'" for w in words) for words, _ in cases]
    result = subprocess.run([shell("zsh"), "-f", "-c", "\n".join(lines)], capture_output=True,
                            text=True, timeout=60, cwd=workdir)
    assert result.returncode == 0, result.stderr
    output = result.stdout.splitlines()
    assert output[0] == "_bash_complete -F _sidecar_debug|_bash_complete -F _sidecar_debug"
    for (words, offered), line in zip(cases, output[1:], strict=True):
        typed, _, got = line.rpartition("|")
        assert typed == " ".join(words)
        matching = {w for w in got.split() if w.startswith(words[-1])}
        assert matching == set(offered.split()), words


def test_fish_completes_natively(workdir: Path) -> None:
    fish = shell("fish")
    path = script("fish", workdir)
    asks = [" ".join(words) for words, _ in CASES]
    program = "; ".join(
        f"echo '>{ask}'; complete -C '{ask}'" for ask in asks)
    result = subprocess.run([fish, "--no-config", "-c", f"source {path}; {program}"],
                            capture_output=True, text=True, timeout=60, cwd=workdir)
    assert result.returncode == 0, result.stderr
    answers: dict[str, set[str]] = {}
    current = ""
    for line in result.stdout.splitlines():
        if line.startswith(">"):
            current = line[1:]
            answers[current] = set()
        else:
            answers[current].add(line.split("\t")[0])
    for words, offered in CASES:
        got = answers[" ".join(words)]
        if words[-1].startswith("ma"):  # fish offers a directory with its slash
            assert {g.rstrip("/") for g in got} == set(offered.split()), words
        elif words[-1] == "--j":
            assert got <= {"--json"} and "--json" not in got
        else:
            assert got == set(offered.split()), words


def test_the_scripts_come_from_the_parser() -> None:
    commands = {c.path: c for c in completion.tree(build_parser())}
    assert commands[""].subcommands.keys() >= {"inject", "guard", "version", "completion"}
    inject = {flag: o for o in commands["inject"].options for flag in o.flags}
    assert inject["-f"].value == "file" and inject["-R"].value == ""
    assert inject["-o"].choices == ["yaml", "json"]
    assert {flag: o.value for o in commands["results list"].options
            for flag in o.flags}["--dir"] == "dir"


def test_kubectl_completes_the_plugin_through_kubectl_complete_executable(tmp_path: Path) -> None:
    """`kubectl sidecar-debug <TAB>`: kubectl's completion (cobra's __complete, which every
    `kubectl completion SHELL` script calls) runs kubectl_complete-sidecar_debug from PATH."""
    from tests.unit.commands.test_kubectl_plugin import VENV_BIN, kubectl

    def ask(*words: str) -> tuple[list[str], str]:
        result = subprocess.run(
            [kubectl(), "__complete", "sidecar-debug", *words], capture_output=True, text=True,
            timeout=60, env={"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(tmp_path)})
        assert result.returncode == 0, result.stderr
        *offered, directive = result.stdout.splitlines()
        return [line.split("\t")[0] for line in offered], directive

    assert ask("gu") == (["guard"], ":4")
    assert ask("guard", "check", "--level", "") == (["baseline", "restricted"], ":4")
    assert ask("guard", "check", "--level=r") == (["--level=restricted"], ":4")
    assert ask("guard", "check", "--le") == (["--level"], ":4")
    assert ask("inject", "-f", "") == ([], ":0")  # the shell completes file names
    assert ask("results", "list", "--dir", "") == ([], ":16")  # directories only
    assert ask("completion", "") == (["bash", "zsh", "fish"], ":4")
