"""`runstate completion bash|zsh`: shell completion scripts, made from the command's own parser.

Each script holds one table, made here by walking the argparse parser: for every command path
(`""`, `"keys"`, `"dead-letters requeue"`...) the words that may come next (its subcommands and
options), the options that take a value, and the commands whose first word is a path of the
caller's (`replay DATA_DIR`). A shell function reads the words typed so far, follows the known
path through them (skipping options and their values), and offers what may follow: a file name
where such a path is still to come, else commands and choices, and options once a dash is typed.
A new command or option is completed with no change here.

    runstate completion bash > /etc/bash_completion.d/runstate     # or: source <(runstate completion bash)
    runstate completion zsh > "${fpath[1]}/_runstate"               # or: source <(runstate completion zsh)
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_command", "tree", "script", "SHELLS"]

SHELLS = ("bash", "zsh")
# Options whose value is a path: the shells complete file names there.
PATH_OPTIONS = frozenset({"--config", "--data-dir", "--admin-key-file", "--certfile", "--keyfile", "--ca-bundle"})
# Positional arguments that are a path (`runstate replay DATA_DIR ...`): file names there, not the subcommands after them.
PATH_POSITIONALS = frozenset({"data_dir"})


def add_command(commands: Any) -> None:
    command = commands.add_parser(
        "completion", help="print a shell completion script (bash or zsh)",
        description="Print a completion script for bash or zsh.", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  source <(runstate completion bash)            # this shell only\n"
               "  runstate completion bash > /etc/bash_completion.d/runstate\n"
               "  runstate completion zsh > \"${fpath[1]}/_runstate\"   # then: autoload -Uz compinit && compinit",
    )
    command.add_argument("shell", choices=SHELLS, help="the shell")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def tree(parser: argparse.ArgumentParser) -> tuple[dict[str, list[str]], set[str], set[str]]:
    """(command path -> the words that may follow it, the options that take a value, the command
    paths whose first word is a path)."""
    words: dict[str, list[str]] = {}
    valued: set[str] = set()
    path_first: set[str] = set()

    def walk(path: str, node: argparse.ArgumentParser) -> None:
        found: list[str] = []
        children = _subparsers(node)
        found.extend(children)
        for action in node._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if action.option_strings:
                found.extend(option for option in action.option_strings if option.startswith("--"))
                if action.nargs != 0:
                    valued.update(action.option_strings)
            elif action.choices:
                found.extend(str(choice) for choice in action.choices)
            elif action.dest in PATH_POSITIONALS:
                path_first.add(path)
        words[path] = found
        for name, child in children.items():
            walk(f"{path} {name}".strip(), child)

    walk("", parser)
    return words, valued, path_first


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    words, valued, path_first = tree(parser)
    if shell == "bash":
        return _bash(words, valued, path_first)
    return _zsh(words, valued, path_first)


def _bash(words: dict[str, list[str]], valued: set[str], path_first: set[str]) -> str:
    cases = "\n".join(f'        "{path}") echo "{" ".join(found)}" ;;' for path, found in words.items())
    known = "|".join(f'"{path}"' for path in words if path)
    return f'''# bash completion for runstate (made by `runstate completion bash`)
_runstate_words() {{
    case "$1" in
{cases}
    esac
}}

_runstate() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="" word i free=0
    case "$prev" in
        {"|".join(sorted(PATH_OPTIONS & valued)) or "--no-such-option"}) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        {"|".join(sorted(valued - PATH_OPTIONS)) or "--no-such-option"}) COMPREPLY=(); return ;;
    esac
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case "$word" in
            -*) continue ;;
        esac
        case "${{COMP_WORDS[i-1]}}" in
            {"|".join(sorted(valued)) or "--no-such-option"}) continue ;;  # an option's value
        esac
        case "${{path:+$path }}$word" in
            {known or '"-"'}) path="${{path:+$path }}$word"; free=0 ;;
            *) free=$((free + 1)) ;;  # a word of the caller's (an id, a name, a path)
        esac
    done
    case "$path" in
        {"|".join(f'"{path}"' for path in sorted(path_first)) or '"-"'})
            if ((free == 0)) && [[ "$cur" != -* ]]; then COMPREPLY=($(compgen -f -- "$cur")); return; fi ;;
    esac
    local offered="" candidate_word
    for candidate_word in $(_runstate_words "$path"); do
        # Options only once a dash is typed; commands and choices before.
        if [[ "$cur" == -* || "$candidate_word" != -* ]]; then offered="$offered $candidate_word"; fi
    done
    COMPREPLY=($(compgen -W "$offered" -- "$cur"))
}}

complete -F _runstate runstate
'''


def _zsh(words: dict[str, list[str]], valued: set[str], path_first: set[str]) -> str:
    entries = "\n".join(f'    "{path}" "{" ".join(found)}"' for path, found in words.items())
    return f'''#compdef runstate
# zsh completion for runstate (made by `runstate completion zsh`): put it in a folder of $fpath as
# _runstate, or `source <(runstate completion zsh)` after compinit.
typeset -gA _runstate_tree
_runstate_tree=(
{entries}
)
typeset -ga _runstate_valued _runstate_paths _runstate_path_first
_runstate_valued=({" ".join(sorted(valued))})
_runstate_paths=({" ".join(sorted(PATH_OPTIONS & valued))})
_runstate_path_first=({" ".join(f'"{path}"' for path in sorted(path_first))})

_runstate() {{
    local prev="${{words[CURRENT-1]}}" path="" word candidate i free=0
    if (( ${{_runstate_paths[(Ie)$prev]}} )); then
        _files
        return
    fi
    (( ${{_runstate_valued[(Ie)$prev]}} )) && return
    for (( i = 2; i < CURRENT; i++ )); do
        word=${{words[i]}}
        [[ $word == -* ]] && continue
        (( ${{_runstate_valued[(Ie)${{words[i-1]}}]}} )) && continue  # an option's value
        candidate="${{path:+$path }}$word"
        if (( ${{+_runstate_tree[$candidate]}} )); then
            path=$candidate
            free=0
        else
            free=$(( free + 1 ))  # a word of the caller's (an id, a name, a path)
        fi
    done
    if (( ${{_runstate_path_first[(Ie)$path]}} && free == 0 )) && [[ "${{words[CURRENT]}}" != -* ]]; then
        _files
        return
    fi
    local -a choices
    choices=(${{=_runstate_tree[$path]}})
    # Options only once a dash is typed; commands and choices before.
    [[ "${{words[CURRENT]}}" == -* ]] || choices=(${{choices:#-*}})
    compadd -- $choices
}}

# Autoloaded from $fpath (compinit): complete now. Sourced: register the function.
if [[ "${{zsh_eval_context[-1]}}" == loadautofunc ]]; then
    _runstate "$@"
else
    compdef _runstate runstate
fi
'''
