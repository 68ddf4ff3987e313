"""Every `kfp-ray` command's --help is complete: each command and subcommand says what it
does, and each of its arguments has help text."""

from __future__ import annotations

import argparse

from kfp_ray.pipelines.__main__ import build_parser


def commands(parser: argparse.ArgumentParser, path=("kfp-ray",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                assert helps.get(name), f"{' '.join(path)} {name} has no one-line help in its parent's list"
                yield from commands(sub, (*path, name))


def test_every_command_and_argument_has_help():
    missing = []
    seen = []
    for path, parser in commands(build_parser()):
        seen.append(" ".join(path))
        if not (parser.description or "").strip():
            missing.append(f"{' '.join(path)}: no description")
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not (action.help or "").strip():
                missing.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}: no help")
        parser.format_help()  # renders (a bad %-format in a help string fails here)
    assert missing == []
    for command in ("run", "upload", "submit", "schedule", "runs list", "runs get", "runs cancel", "doctor", "gc",
                    "compile", "cluster up", "cluster status", "cluster details", "cluster list", "cluster down"):
        assert f"kfp-ray {command}" in seen


def test_run_local_offers_exactly_the_platforms_the_sandbox_plays():
    """`kfp-ray run --platform` lists its choices without importing the sandbox (heavy for --help)."""
    from kfp_ray_sandbox.platforms import DEFAULT_PLATFORM, PLATFORMS

    run = dict(commands(build_parser()))[("kfp-ray", "run")]
    platform = next(a for a in run._actions if a.dest == "platform")
    assert sorted(platform.choices) == sorted(PLATFORMS) and DEFAULT_PLATFORM in platform.help
