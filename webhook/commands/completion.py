"""`sidecar-debug completion bash|zsh|fish`: a shell completion script, generated from the
argparse tree (every command, subcommand, option, option choices, which options take files).

The script is static (no Python runs on TAB): regenerate it after an upgrade. It completes
both names the program has: `sidecar-debug` and `kubectl-sidecar_debug` (the kubectl plugin).
bash and zsh share one script (zsh through its bashcompinit, with plain `case` tables that
read the same in both shells); fish gets native `complete` lines.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROGRAMS = ("sidecar-debug", "kubectl-sidecar_debug")
# Options whose value is a file or directory, by their destination (where neither the type
# nor the metavar says so).
FILE_DESTS = {
    "filename", "config", "kubeconfig", "policy", "policy_path", "out", "tls_cert_file",
    "tls_key_file", "meta", "diff", "ca", "cert", "key", "output",
}
DIR_DESTS = {"dir", "results_dir"}

USAGE = """\
Print a completion script for bash, zsh or fish; it completes commands, subcommands, options,
option values with a fixed set of choices, and file names where a file is expected, for
`sidecar-debug` and for `kubectl-sidecar_debug` (the kubectl plugin's executable).

  bash:  source <(sidecar-debug completion bash)      # or save it as
         sidecar-debug completion bash > ~/.local/share/bash-completion/completions/sidecar-debug
  zsh:   source <(sidecar-debug completion zsh)       # in ~/.zshrc, after compinit
  fish:  sidecar-debug completion fish > ~/.config/fish/completions/sidecar-debug.fish

`kubectl sidecar-debug <TAB>` goes through kubectl's own completion (`kubectl completion
bash|zsh|fish`): kubectl >= 1.26 asks the executable kubectl_complete-sidecar_debug, which this
package installs, so nothing more is needed there.
"""


@dataclass
class Option:
    flags: list[str]
    value: str  # "" (a flag), "file", "dir", "choices", "value"
    choices: list[str]
    help: str


@dataclass
class Command:
    path: str  # "" for the top, "guard check", ...
    help: str = ""
    subcommands: dict[str, str] = field(default_factory=dict)  # name -> help
    options: list[Option] = field(default_factory=list)
    positional: str = ""  # what a positional argument completes: "", "file", "choices"
    positional_choices: list[str] = field(default_factory=list)


def _value_kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        return "choices"
    metavar = str(action.metavar or "").upper()
    if action.dest in DIR_DESTS or metavar == "DIR":
        return "dir"
    if action.type is Path or action.dest in FILE_DESTS or metavar in ("FILE", "PATH"):
        return "file"
    return "value"


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("%(default)s", "").split(". ")[0][:80]


def tree(parser: argparse.ArgumentParser) -> list[Command]:
    """Every command of `parser` with what completes after it, the top first."""
    commands: list[Command] = []

    def visit(current: argparse.ArgumentParser, path: str, help_text: str) -> None:
        command = Command(path, help_text)
        commands.append(command)
        children: list[tuple[str, argparse.ArgumentParser, str]] = []
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help or "" for a in action._choices_actions}
                for name, sub in action.choices.items():
                    if name.startswith("_"):
                        continue
                    command.subcommands[name] = _one_line(helps.get(name))
                    children.append((name, sub, helps.get(name, "")))
            elif action.option_strings:
                if action.help == argparse.SUPPRESS or str(action.help).startswith("deprecated"):
                    continue
                kind = _value_kind(action)
                command.options.append(Option(
                    list(action.option_strings), kind,
                    [str(c) for c in action.choices or []], _one_line(action.help)))
            elif not command.positional:
                kind = _value_kind(action)
                command.positional = kind if kind in ("file", "dir", "choices") else ""
                command.positional_choices = [str(c) for c in action.choices or []]
        for name, sub, sub_help in children:
            visit(sub, f"{path} {name}".strip(), sub_help)

    visit(parser, "", parser.description or "")
    return commands


# -- bash (and zsh) -----------------------------------------------------------------------------


def _q(text: str) -> str:
    """A single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"


def bash(commands: list[Command]) -> str:
    subcommands = [f"        {_q(c.path)}) echo {_q(' '.join(c.subcommands))};;"
                   for c in commands if c.subcommands]
    options = [f"        {_q(c.path)}) echo {_q(' '.join(f for o in c.options for f in o.flags))};;"
               for c in commands if c.options]
    values: list[str] = []
    for command in commands:
        for option in command.options:
            if not option.value:
                continue
            kind = "choices " + " ".join(option.choices) if option.value == "choices" \
                else option.value
            patterns = "|".join(_q(f"{command.path}|{flag}") for flag in option.flags)
            values.append(f"        {patterns}) echo {_q(kind)};;")
    positionals = []
    for command in commands:
        if command.positional and not command.subcommands:
            kind = "choices " + " ".join(command.positional_choices) \
                if command.positional == "choices" else command.positional
            positionals.append(f"        {_q(command.path)}) echo {_q(kind)};;")
    return BASH_TEMPLATE.format(
        subcommands="\n".join(subcommands), options="\n".join(options),
        values="\n".join(values), positionals="\n".join(positionals),
        programs=" ".join(PROGRAMS))


BASH_TEMPLATE = """\
# sidecar-debug completion for bash and zsh (generated by `sidecar-debug completion`; regenerate
# it after an upgrade). Completes `sidecar-debug` and `kubectl-sidecar_debug`.

_sidecar_debug_subcommands() {{
    case "$1" in
{subcommands}
    esac
}}

_sidecar_debug_options() {{
    case "$1" in
{options}
    esac
}}

# What the option $2 of command $1 takes: file, dir, value, or "choices A B ..."; fails for a flag.
_sidecar_debug_value() {{
    case "$1|$2" in
{values}
        *) return 1;;
    esac
}}

_sidecar_debug_positional() {{
    case "$1" in
{positionals}
    esac
}}

_sidecar_debug_filenames() {{
    # bash: quote and mark directories as file names; zsh's bashcompinit has no compopt
    type compopt >/dev/null 2>&1 && compopt -o filenames 2>/dev/null
    return 0
}}

_sidecar_debug_reply() {{
    # $1: file, dir, "choices ..." or anything else (nothing to offer); $2: the word so far
    local IFS=$'\\n'
    case "$1" in
        file) COMPREPLY=($(compgen -f -- "$2")); _sidecar_debug_filenames;;
        dir) COMPREPLY=($(compgen -d -- "$2")); _sidecar_debug_filenames;;
        "choices "*) IFS=$' \\t\\n'; COMPREPLY=($(compgen -W "${{1#choices }}" -- "$2"));;
        *) COMPREPLY=();;
    esac
}}

_sidecar_debug() {{
    local sd_cur="${{COMP_WORDS[COMP_CWORD]}}" sd_cmd="" sd_word sd_sub sd_kind sd_prev sd_i
    for ((sd_i = 1; sd_i < COMP_CWORD; sd_i++)); do
        sd_word="${{COMP_WORDS[sd_i]}}"
        case "$sd_word" in
            -*=*|=) continue;;
            -*) if _sidecar_debug_value "$sd_cmd" "$sd_word" >/dev/null; then
                    if [ "${{COMP_WORDS[sd_i+1]}}" = "=" ]; then ((sd_i++)); fi
                    ((sd_i++))
                fi
                continue;;
        esac
        for sd_sub in $(_sidecar_debug_subcommands "$sd_cmd"); do
            if [ "$sd_sub" = "$sd_word" ]; then
                sd_cmd="${{sd_cmd:+$sd_cmd }}$sd_word"
                break
            fi
        done
    done
    sd_prev=""
    if ((COMP_CWORD > 1)); then sd_prev="${{COMP_WORDS[COMP_CWORD-1]}}"; fi
    if [ "$sd_cur" = "=" ]; then  # `--level=`: bash splits the word at `=`
        sd_prev="${{COMP_WORDS[COMP_CWORD-1]}}"; sd_cur=""
    elif [ "$sd_prev" = "=" ] && ((COMP_CWORD > 2)); then
        sd_prev="${{COMP_WORDS[COMP_CWORD-2]}}"
    fi
    case "$sd_prev" in
        -*) if sd_kind=$(_sidecar_debug_value "$sd_cmd" "$sd_prev"); then
                _sidecar_debug_reply "$sd_kind" "$sd_cur"
                return 0
            fi;;
    esac
    case "$sd_cur" in
        -*) COMPREPLY=($(compgen -W "$(_sidecar_debug_options "$sd_cmd")" -- "$sd_cur"))
            return 0;;
    esac
    sd_sub=$(_sidecar_debug_subcommands "$sd_cmd")
    if [ -n "$sd_sub" ]; then
        COMPREPLY=($(compgen -W "$sd_sub" -- "$sd_cur"))
    else
        _sidecar_debug_reply "$(_sidecar_debug_positional "$sd_cmd")" "$sd_cur"
    fi
    return 0
}}

complete -F _sidecar_debug {programs}
"""

ZSH_HEADER = """\
#compdef sidecar-debug kubectl-sidecar_debug
# zsh: the bash script through zsh's bashcompinit (source it after compinit).
if ! (( $+functions[compdef] )); then
    autoload -U +X compinit && compinit
fi
autoload -U +X bashcompinit && bashcompinit

"""


# -- fish ---------------------------------------------------------------------------------------


def _fish_q(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(commands: list[Command]) -> str:
    lines = [
        "# sidecar-debug completion for fish (generated by `sidecar-debug completion fish`;",
        "# regenerate it after an upgrade).",
        "",
        "function __sidecar_debug_subcommands",
        "    switch $argv[1]",
    ]
    for command in commands:
        if command.subcommands:
            lines.append(f"        case {_fish_q(command.path)}")
            lines.append(f"            printf '%s\\n' {' '.join(command.subcommands)}")
    lines += ["    end", "end", "", "function __sidecar_debug_takes_value",
              "    switch \"$argv[1]|$argv[2]\""]
    takes = [_fish_q(f"{c.path}|{flag}") for c in commands for o in c.options if o.value
             for flag in o.flags]
    if takes:
        lines += [f"        case {' '.join(takes)}", "            return 0"]
    lines += [
        "    end",
        "    return 1",
        "end",
        "",
        "function __sidecar_debug_command",
        "    set -l tokens (commandline -opc)",
        "    set -e tokens[1]",
        "    set -l cmd ''",
        "    set -l skip 0",
        "    for word in $tokens",
        "        if test $skip = 1",
        "            set skip 0",
        "            continue",
        "        end",
        "        if string match -q -- '-*' $word",
        "            if not string match -q -- '*=*' $word",
        "                and __sidecar_debug_takes_value \"$cmd\" $word",
        "                set skip 1",
        "            end",
        "            continue",
        "        end",
        "        if contains -- $word (__sidecar_debug_subcommands \"$cmd\")",
        "            set cmd (string trim -- \"$cmd $word\")",
        "        end",
        "    end",
        "    echo $cmd",
        "end",
        "",
        "function __sidecar_debug_at",
        "    set -l cmd (__sidecar_debug_command)",
        "    test \"$cmd\" = \"$argv[1]\"",
        "end",
        "",
    ]
    program = PROGRAMS[0]
    lines.append(f"complete -c {program} -f")
    for command in commands:
        at = f"-n {_fish_q('__sidecar_debug_at ' + _fish_q(command.path))}"
        for name, help_text in command.subcommands.items():
            lines.append(f"complete -c {program} {at} -a {name} -d {_fish_q(help_text)}")
        for option in command.options:
            spec = []
            for flag in option.flags:
                if flag.startswith("--"):
                    spec.append(f"-l {flag[2:]}")
                elif len(flag) == 2:
                    spec.append(f"-s {flag[1]}")
                else:
                    spec.append(f"-o {flag[1:]}")
            if option.value == "file":
                spec.append("-r -F")
            elif option.value == "dir":
                spec.append("-r -a '(__fish_complete_directories)'")
            elif option.value == "choices":
                spec.append(f"-x -a {_fish_q(' '.join(option.choices))}")
            elif option.value:
                spec.append("-x")
            lines.append(f"complete -c {program} {at} {' '.join(spec)} "
                         f"-d {_fish_q(option.help)}")
        if command.positional and not command.subcommands:
            if command.positional == "file":
                lines.append(f"complete -c {program} {at} -F")
            elif command.positional == "choices":
                lines.append(f"complete -c {program} {at} -a "
                             f"{_fish_q(' '.join(command.positional_choices))}")
    # The plugin's executable completes as sidecar-debug does (fish's --wraps).
    lines += [f"complete -c {name} -w {program}" for name in PROGRAMS[1:]]
    return "\n".join(lines) + "\n"


# -- kubectl's plugin completion ----------------------------------------------------------------

# cobra's ShellCompDirective values, which kubectl passes on to the shell's script
NO_FILES = 4  # offer only what is printed
FILES = 0  # nothing printed: the shell completes file names
DIRECTORIES = 16


def complete_words(commands: list[Command], words: list[str]) -> tuple[list[str], int]:
    """What to offer after `words` (the last one is being typed, maybe ""), as cobra's
    `__complete` answers: candidates ("word\tdescription") and a directive."""
    by_path = {c.path: c for c in commands}
    current, typed = (words[-1], words[:-1]) if words else ("", [])

    def option(command: Command, flag: str) -> Option | None:
        return next((o for o in command.options if flag in o.flags), None)

    path, index = "", 0
    while index < len(typed):
        word = typed[index]
        command = by_path[path]
        if word.startswith("-"):
            found = option(command, word)
            index += 2 if found is not None and found.value and "=" not in word else 1
            continue
        if word in command.subcommands:
            path = f"{path} {word}".strip()
        index += 1
    command = by_path[path]

    def value_of(found: Option, prefix: str, typed_value: str) -> tuple[list[str], int]:
        if found.value == "choices":
            return [prefix + c for c in found.choices if c.startswith(typed_value)], NO_FILES
        if found.value == "file":
            return [], FILES
        if found.value == "dir":
            return [], DIRECTORIES
        return [], NO_FILES

    if typed and typed[-1].startswith("-") and "=" not in typed[-1]:
        found = option(command, typed[-1])
        if found is not None and found.value:
            return value_of(found, "", current)
    if current.startswith("-"):
        flag, equals, typed_value = current.partition("=")
        found = option(command, flag)
        if equals and found is not None and found.value:
            return value_of(found, f"{flag}=", typed_value)
        return [f"{flag}\t{o.help}" for o in command.options for flag in o.flags
                if flag.startswith(current)], NO_FILES
    if command.subcommands:
        return [f"{name}\t{text}" for name, text in command.subcommands.items()
                if name.startswith(current)], NO_FILES
    if command.positional == "choices":
        return [c for c in command.positional_choices if c.startswith(current)], NO_FILES
    if command.positional == "file":
        return [], FILES
    return [], NO_FILES


def kubectl_complete() -> int:
    """The executable kubectl_complete-sidecar_debug: kubectl runs it with the words after
    `kubectl sidecar-debug` (the last one being typed) and passes its answer to the shell."""
    from webhook.commands.cli import build_parser

    candidates, directive = complete_words(tree(build_parser("kubectl sidecar-debug")),
                                           sys.argv[1:])
    sys.stdout.write("".join(f"{line}\n" for line in candidates) + f":{directive}\n")
    return 0


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    commands = tree(parser)
    if shell == "fish":
        return fish(commands)
    text = bash(commands)
    return ZSH_HEADER + text if shell == "zsh" else text


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "completion", help="print a shell completion script (bash, zsh, fish)",
        description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from webhook.commands.cli import build_parser

    sys.stdout.write(script(build_parser(), args.shell))
    return 0
