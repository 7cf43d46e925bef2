"""``dtq completion bash|zsh|fish``: a completion script generated from the argument parser
itself (its commands, actions, options and their choices), so it never lags the CLI and the
SDK needs nothing to make it. ``source <(dtq completion bash)`` loads it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from dtq_core import __version__

SHELLS = ("bash", "zsh", "fish")


@dataclass
class Option:
    """One option of a command: its spellings, help, whether it takes a value, its choices."""

    strings: list[str]
    help: str
    takes_value: bool
    choices: list[str]


@dataclass
class Node:
    """The root parser or one (sub)command, found under ``path`` (``/queue/create``)."""

    path: str
    help: str = ""
    options: list[Option] = field(default_factory=list)
    commands: dict[str, Node] = field(default_factory=dict)
    choices: list[str] = field(default_factory=list)
    """The values of its positional argument, when it has a fixed set (``completion SHELL``)."""
    files: bool = False
    """A positional argument names a file (``workflow submit FILE``)."""

    def walk(self) -> list[Node]:
        """This node and every node under it, depth first."""
        return [self, *(n for c in self.commands.values() for n in c.walk())]


def tree(parser: argparse.ArgumentParser, path: str = "", help_text: str = "") -> Node:
    """The commands, options and choices of ``parser`` and its subparsers."""
    node = Node(path, help_text)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                node.commands[name] = tree(sub, f"{path}/{name}", helps.get(name, ""))
        elif action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            choices = [str(c) for c in action.choices or ()]
            node.options.append(
                Option(list(action.option_strings), action.help or "", action.nargs != 0, choices)
            )
        elif action.choices:
            node.choices = [str(c) for c in action.choices]
        elif action.metavar == "FILE":
            node.files = True
    return node


def bash(root: Node) -> str:
    """A bash completion function for ``dtq``."""
    nodes = root.walk()
    known = "|".join(n.path for n in nodes if n.path)
    values = []
    for n in nodes:
        for o in (o for o in n.options if o.takes_value):
            pattern = "|".join(f"{n.path}:{s}" for s in o.strings)
            reply = f'$(compgen -W "{" ".join(o.choices)}" -- "$cur")' if o.choices else ""
            values.append(f"        {pattern}) COMPREPLY=({reply}); return ;;")
    words = []
    for n in nodes:
        listed = [*n.commands, *n.choices, *(s for o in n.options for s in o.strings)]
        files = ' $(compgen -f -- "$cur")' if n.files else ""
        reply = f'$(compgen -W "{" ".join(listed)}" -- "$cur"){files}'
        words.append(f'        "{n.path}") COMPREPLY=({reply}) ;;')
    return "\n".join(
        [
            f"# bash completion for dtq {__version__}, made by `dtq completion bash`.",
            "# Load it with: source <(dtq completion bash)",
            "_dtq() {",
            "    local cur prev path word i",
            '    cur="${COMP_WORDS[COMP_CWORD]}"',
            '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
            '    path=""',
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            '        word="${COMP_WORDS[i]}"',
            '        case "${path}/${word}" in',
            f'            {known}) path="${{path}}/${{word}}" ;;',
            "        esac",
            "    done",
            '    case "${path}:${prev}" in',
            *values,
            "    esac",
            '    case "${path}" in',
            *words,
            "    esac",
            "}",
            "complete -F _dtq dtq",
            "",
        ]
    )


def zsh(root: Node) -> str:
    """The bash function, run by zsh's bash completion emulation."""
    return "\n".join(
        [
            "#compdef dtq",
            f"# zsh completion for dtq {__version__}, made by `dtq completion zsh`.",
            "# Load it with: source <(dtq completion zsh)",
            "autoload -U +X compinit && compinit",
            "autoload -U +X bashcompinit && bashcompinit",
            bash(root),
        ]
    )


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(root: Node) -> str:
    """``complete`` lines for ``dtq``, each under the command path it belongs to."""
    nodes = root.walk()
    lines = [
        f"# fish completion for dtq {__version__}, made by `dtq completion fish`.",
        "# Load it with: dtq completion fish | source",
        "set -g __dtq_nodes " + " ".join(n.path for n in nodes if n.path),
        "function __dtq_at",
        '    set -l path ""',
        "    for w in (commandline -opc)[2..-1]",
        '        if contains -- "$path/$w" $__dtq_nodes',
        '            set path "$path/$w"',
        "        end",
        "    end",
        '    test "$path" = "$argv[1]"',
        "end",
        "complete -c dtq -f",
    ]
    for n in nodes:
        at = f"-n {_fish_quote(f'__dtq_at {n.path}'.rstrip())}"
        for name, sub in n.commands.items():
            lines.append(f"complete -c dtq {at} -a {name} -d {_fish_quote(sub.help)}")
        if n.choices:
            lines.append(f"complete -c dtq {at} -a {_fish_quote(' '.join(n.choices))}")
        if n.files:
            lines.append(f"complete -c dtq {at} -F")
        for o in n.options:
            spell = " ".join(
                f"-l {s[2:]}" if s.startswith("--") else f"-s {s[1:]}" for s in o.strings
            )
            value = ""
            if o.takes_value:
                value = f" -x -a {_fish_quote(' '.join(o.choices))}" if o.choices else " -r"
            lines.append(f"complete -c dtq {at} {spell}{value} -d {_fish_quote(o.help)}")
    return "\n".join([*lines, ""])


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell`` (one of :data:`SHELLS`)."""
    root = tree(parser)
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](root)


def completion(ns: argparse.Namespace) -> int:
    """Print the completion script for ``ns.shell`` of the whole command line (``ns.root``,
    the parser that parsed it)."""
    sys.stdout.write(script(ns.root, ns.shell))
    return 0
