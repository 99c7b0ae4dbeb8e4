"""The typer application and plan3d's error contract: one line on stderr and exit 2 for usage
errors, a quiet exit on a closed pipe, no traceback ever; --version; and main(), which builds only
the command being run."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from .._version import __version__
from ..errors import (
    EXIT_BUG,
    EXIT_OK,
    EXIT_USAGE,
    PlanError,
    exit_code,
)

HELP = (
    "Plan 3D-parallel (data × tensor × pipeline × context) LLM training.\n\n"
    "Exit codes: 0 success · 1 no plan fits (the diagnosis is on stderr) · 2 bad usage or input "
    "(one line on stderr: plan3d: error: ...) · 3 internal error (a bug in plan3d: please report "
    "it; PLAN3D_DEBUG=1 shows the traceback).\n\n"
    "With --json, stdout holds only the JSON; plan3d schema COMMAND prints its JSON Schema.")


def _quiet_stdout() -> None:
    """The reader went away (`| head`): send what is left of stdout nowhere, exit quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _click_errors():
    """click's exception classes: vendored inside typer ≥ 0.2x, the click package before."""
    try:
        from typer._click import exceptions as exc
    except ImportError:  # older typer on click
        from click import exceptions as exc
    no_args = getattr(exc, "NoArgsIsHelpError", None)
    return exc.ClickException, exc.UsageError, exc.BadParameter, no_args


def _stdout_gone() -> bool:
    """stdout was pointed at the null device after a closed pipe (rich does that, then exits 1)."""
    try:
        out, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
        return (out.st_dev, out.st_ino) == (null.st_dev, null.st_ino)
    except (OSError, ValueError, AttributeError):
        return False


def _usage_message(exc) -> str:
    """typer/click's usage errors as one line: the flag, what was expected, what was given."""
    from pydantic import ValidationError

    from ..errors import problem_text

    BadParameter = _click_errors()[2]
    try:
        message = exc.format_message()
    except AttributeError:  # a click/typer mismatch formatting a missing argument
        message = exc.message or "missing argument"
    param = getattr(exc, "param", None)
    cause = exc.__cause__
    if isinstance(exc, BadParameter) and param is not None and isinstance(cause, ValidationError) \
            and cause.errors():
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        name = opts[0] if opts else str(getattr(param, "name", "value")).upper()
        message = f"{name}: {problem_text(cause.errors()[0])}"
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "plan3d"
    return f"{message.rstrip('.')} (see '{where} --help')"


class _Group(TyperGroup):
    """typer's group with plan3d's error contract: one line on stderr and exit 2 for usage
    errors, a quiet exit on a closed pipe, no traceback ever (exit 3 and a one-line report for a
    bug, unless PLAN3D_DEBUG is set)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _quiet_stdout()
            raise typer.Exit(EXIT_OK) from None

    def parse_args(self, ctx, args):  # --help, --version and no-arguments help print from here
        try:
            return super().parse_args(ctx, args)
        except BrokenPipeError:
            _quiet_stdout()
            raise typer.Exit(EXIT_OK) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        sys.exit(self._guarded(args, "plan3d", complete_var, **extra))

    def _guarded(self, args, prog_name, complete_var, **extra) -> int:
        def error(message: str) -> None:  # rich, numpy and the models load only for an error
            from ..outputs.render import error as say

            say(message)

        ClickException, UsageError, _, NoArgsIsHelpError = _click_errors()
        NoArgsIsHelpError = NoArgsIsHelpError or ()

        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else EXIT_OK
        except NoArgsIsHelpError as exc:
            help_text = exc.format_message()  # empty when typer's rich help printed it already
            if help_text.strip():
                sys.stdout.write(help_text + "\n")
            code = EXIT_USAGE
        except UsageError as exc:
            error(_usage_message(exc))
            code = EXIT_USAGE
        except ClickException as exc:
            error(exc.format_message())
            code = exc.exit_code
        except typer.Abort:
            error("aborted")
            code = 130
        except PlanError as exc:
            error(str(exc))
            code = exit_code(exc)
        except BrokenPipeError:
            _quiet_stdout()
            code = EXIT_OK
        except SystemExit as exc:  # rich's own closed-pipe exit (typer's help): quiet, not 1
            if exc.code == 1 and _stdout_gone():
                code = EXIT_OK
            else:
                raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if os.environ.get("PLAN3D_DEBUG"):
                raise
            error(f"internal error ({type(exc).__name__}: {exc}); this is a bug in plan3d "
                  f"{__version__}: please report it with the command line "
                  "(PLAN3D_DEBUG=1 shows the traceback)")
            code = EXIT_BUG
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        except (OSError, ValueError):
            pass
        return code


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False, help=HELP)


class PanelledHelp(typer.core.TyperCommand):
    """A command whose --help groups its options into rich panels (each option names its panel
    where it is declared: flags.PANELS): the commands with many options. The root --help stays
    plain, and so fast (benchmarks/)."""

    def format_help(self, ctx, formatter) -> None:
        self.rich_markup_mode = "rich"
        from typer import rich_utils

        typers = getattr(rich_utils, "_print_options_panel", None)
        if typers is None or not hasattr(rich_utils, "_get_parameter_help"):
            super().format_help(ctx, formatter)  # a typer without them: its own panels
            return
        rich_utils._print_options_panel = _options_panel  # whole flag names at any width
        try:
            super().format_help(ctx, formatter)
        finally:
            rich_utils._print_options_panel = typers


def _options_panel(*, name, params, ctx, markup_mode, console) -> None:
    """typer's options panel with the flag names never cut: typer sets the names of a flag and
    its --no- form in columns of their own, which at 80 columns rich shortens
    (`--torchtitan-fle…`); here they stack in one column (outputs.render.options_panel)."""
    from typer import rich_utils

    from ..outputs.render import options_panel

    rows = []
    for param in params:
        opts = getattr(param, "opts", []) or [param.human_readable_name]
        names = [o for o in opts if o.startswith("--")] + [o for o in opts
                                                           if not o.startswith("--")]
        kind = (param.display_type_rich(ctx=ctx) if hasattr(param, "display_type_rich")
                else None) or ""
        bounds = getattr(param, "_get_number_range_help_str", lambda: None)()
        kind += f" [{bounds}]" if bounds else ""
        help_text = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
        rows.append((param.required, names, list(getattr(param, "secondary_opts", [])), kind,
                     help_text))
    options_panel(console, name, rows)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"plan3d {__version__}\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """plan3d: how to lay a large-model training job out over a GPU cluster, with reasons."""


def _build_only_what_runs(args: list[str]) -> None:
    """typer builds the parameters of every command before it parses (≈ 3 ms each, half the
    time it spends before the command runs): keep only the command being run, or none for
    --version (click's lazy-group idea). A root --help, or anything else, keeps them all."""
    if not args:
        return
    if args[0] == "--version":
        app.registered_commands[:] = []
        return
    chosen = [c for c in app.registered_commands if (c.name or c.callback.__name__) == args[0]]
    if chosen:
        app.registered_commands[:] = chosen


def main() -> None:
    """Console entry point: usage errors exit 2 with one line, a closed pipe ends quietly (see
    _Group)."""
    import gc

    _build_only_what_runs(sys.argv[1:])
    try:
        app(prog_name="plan3d")
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(EXIT_OK)
    finally:
        # the process ends here: spare the interpreter's last collection of every object
        # (~50 ms after explain); the console entry point only, never an in-process caller
        gc.freeze()
