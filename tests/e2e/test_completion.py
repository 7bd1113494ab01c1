"""`runstate completion bash|zsh`: the scripts complete commands, actions and options in real shells,
and a path after an option that takes one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..tools import require_tool

pytestmark = pytest.mark.e2e


def script(shell: str) -> str:
    done = subprocess.run([sys.executable, "-m", "runstate.server.cli", "completion", shell], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def bash_complete(words: list[str]) -> list[str]:
    """What bash offers for the last of `words` (the line typed so far, split), with the script sourced."""
    bash = require_tool("bash", "bash")
    array = " ".join("'" + word.replace("'", "'\\''") + "'" for word in words)
    program = f'{script("bash")}\nCOMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; _runstate; printf "%s\\n" "${{COMPREPLY[@]}}"'
    done = subprocess.run([bash, "--norc", "--noprofile", "-c", program], capture_output=True, text=True, timeout=30, cwd="/")
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def zsh_complete(words: list[str]) -> list[str]:
    """What the zsh function offers (all candidates; zsh's compadd filters by the prefix itself)."""
    zsh = require_tool("zsh", "zsh")
    array = " ".join("'" + word.replace("'", "'\\''") + "'" for word in words)
    stubs = 'compdef() { :; }; compadd() { [[ $1 == -- ]] && shift; print -l -- "$@"; }; _files() { print "(files)"; }'
    program = f'{stubs}\n{script("zsh")}\nwords=({array}); CURRENT={len(words)}; _runstate'
    done = subprocess.run([zsh, "-f", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_bash_completes_commands_actions_options_and_paths():
    first = bash_complete(["runstate", ""])
    assert {"top", "dead-letters", "completion", "serve"} <= set(first) and "--help" not in first
    assert "--version" in bash_complete(["runstate", "-"])
    assert bash_complete(["runstate", "dead"]) == ["dead-letters"]
    assert bash_complete(["runstate", "dead-letters", "re"]) == ["requeue"]
    options = bash_complete(["runstate", "dead-letters", "requeue", "research", "--o"])
    assert options == ["--older-than"]
    assert "--dry-run" in bash_complete(["runstate", "--space", "x", "mailboxes", "purge", "research", "--"])
    assert bash_complete(["runstate", "completion", ""]) == ["bash", "zsh"]
    assert "etc" in bash_complete(["runstate", "check", "--data-dir", "e"])  # a path (run from /)
    assert bash_complete(["runstate", "runs", "cancel", "--space", ""]) == []  # a value, not a word


def test_zsh_completes_the_same_tree():
    zsh = require_tool("zsh", "zsh")
    check = subprocess.run([zsh, "-n"], input=script("zsh"), capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    assert {"top", "dead-letters", "runs"} <= set(zsh_complete(["runstate", ""]))
    assert zsh_complete(["runstate", "dead-letters", "re"]) == ["list", "requeue", "delete"]
    assert "--older-than" in zsh_complete(["runstate", "dead-letters", "requeue", "research", "--o"])
    assert zsh_complete(["runstate", "claims", "release", "--space", "x", "-"])[:2] == ["--help", "--url"]
    assert zsh_complete(["runstate", "claims", ""]) == ["list", "release"]
    assert zsh_complete(["runstate", "serve", "--config", ""]) == ["(files)"]


def test_a_path_comes_first_where_the_command_takes_one_before_its_subcommands():
    """`runstate replay DATA_DIR [inspect|diff]`: a file name first (argparse would take `inspect` for the
    directory), the subcommands once it is given; an option's value is not taken for it."""
    first = bash_complete(["runstate", "replay", ""])
    assert "etc" in first and "inspect" not in first  # (run from /)
    assert bash_complete(["runstate", "replay", "--at", "lsn:5", "e"]) == ["etc"]
    assert bash_complete(["runstate", "replay", "/data", "--at", "lsn:5", ""]) == ["inspect", "diff"]
    assert "runs" in bash_complete(["runstate", "replay", "/data", "inspect", ""])
    assert bash_complete(["runstate", "inspect", "--space", "runs", ""])[:2] == ["runs", "claims"]  # a value, not a command
    assert zsh_complete(["runstate", "replay", ""]) == ["(files)"]
    assert zsh_complete(["runstate", "replay", "--at", "lsn:5", ""]) == ["(files)"]
    assert zsh_complete(["runstate", "replay", "/data", ""]) == ["inspect", "diff"]
    assert zsh_complete(["runstate", "inspect", "--space", "runs", ""])[:2] == ["runs", "claims"]
