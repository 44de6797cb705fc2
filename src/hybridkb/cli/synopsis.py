"""The one-screen synopsis of every command, rendered from the click parser itself.

The README shows it (tests/test_readme.py checks the README's copy against this), so
a new command or option cannot be left out of the documentation.
"""

from __future__ import annotations

import click

HEADER = "hybridkb [--db PATH_OR_URL] [--workspace NAME] COMMAND"


def _option(option: click.Option) -> str:
    long = [o for o in option.opts if o.startswith("--")] or option.opts
    if option.secondary_opts:  # --rerank/--no-rerank
        return f"[{long[0]}|{option.secondary_opts[0]}]"
    if option.is_flag:
        return f"[{long[0]}]"
    if isinstance(option.type, click.Choice):
        value = "|".join(str(c) for c in option.type.choices)
    elif option.metavar:
        value = option.metavar
    elif isinstance(option.type, click.types.IntParamType):
        value = "N"
    else:
        value = (option.name or "value").upper()
    return f"{long[0]} {value}" if option.required else f"[{long[0]} {value}]"


def _argument(argument: click.Argument) -> str:
    name = argument.metavar or (argument.name or "ARG").upper()
    if argument.nargs == -1 and not name.endswith("..."):
        name += "..."
    return name if argument.required else f"[{name}]"


def _lines(ctx: click.Context, command: click.Command, path: list[str]) -> list[str]:
    if isinstance(command, click.Group):
        lines: list[str] = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                lines += _lines(ctx, sub, [*path, name])
        return lines
    parts = list(path)
    parts += [_argument(p) for p in command.params if isinstance(p, click.Argument)]
    parts += [
        _option(p)
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and p.name != "help"
    ]
    return [" ".join(parts)]


def synopsis(group: click.Group) -> str:
    """Every subcommand of ``group`` with its arguments and options, one per line."""
    ctx = click.Context(group, info_name="hybridkb")
    return "\n".join([HEADER, *(f"  {line}" for line in _lines(ctx, group, []))])
