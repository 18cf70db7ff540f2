"""``benchctl``: the command group, and the one place errors become messages and exit codes."""

from __future__ import annotations

import os
import sys
import traceback

import click

from benchctl import __version__
from benchctl.cli.check import check
from benchctl.cli.comm_volume import comm_volume_command
from benchctl.cli.down import down
from benchctl.cli.import_files import import_command
from benchctl.cli.leaderboard import leaderboard
from benchctl.cli.logs import logs
from benchctl.cli.offers import offers
from benchctl.cli.options import CliState, db_option
from benchctl.cli.plan import plan
from benchctl.cli.predict import predict_command
from benchctl.cli.preflight import preflight_command
from benchctl.cli.report import report_command
from benchctl.cli.run import resume, run
from benchctl.cli.status import status


class _Commands(click.Group):
    """The command group; a mistyped command name gets the nearest ones suggested."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                            list[str]]:
        import difflib

        name = args[0] if args else ""
        if args and self.get_command(ctx, name) is None and not name.startswith("-"):
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=2, cutoff=0.6)
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean {' or '.join(repr(c) for c in close)}?")
        return super().resolve_command(ctx, args)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="benchctl")
@click.option("--db", metavar="URL", help="SQLAlchemy database URL [env BENCHCTL_DB; default "
              "sqlite:///$BENCHCTL_HOME/benchctl.db].")
@click.option("--debug", is_flag=True, envvar="BENCHCTL_DEBUG", help="Show tracebacks [env BENCHCTL_DEBUG=1].")
@click.pass_context
def cli(ctx: click.Context, db: str | None, debug: bool) -> None:
    """Benchmark campaigns on rented multi-GPU nodes, ranked by cost-to-train.

    \b
      benchctl offers --gpu H100_SXM --count 8  what each provider rents now, and at what $/hr
      benchctl check                            which providers' credentials work
      benchctl plan campaigns/h100-matrix.yaml  offers and worst-case spend, no launch
      benchctl predict --model nanochat-d26 --gpu H100_SXM --count 8   step time before renting
      benchctl run campaigns/local-smoke.yaml   run (or continue) a campaign
      benchctl resume                           continue every unfinished campaign
      benchctl status                           cells, attempts and spend
      benchctl logs CELL [-f]                   why a cell's attempts ended, and their events
      benchctl down NAME                        terminate every node of a campaign
      benchctl leaderboard                      cost-to-train per provider and configuration
      benchctl import rows.json nccl.log        measurements taken elsewhere join the ranking
      benchctl report NAME --out DIR            one HTML page: plots, leaderboard, preflight, spend
    """
    ctx.obj = CliState(db=db, debug=debug)


for command in (run, plan, resume, down, status, leaderboard, import_command, report_command,
                comm_volume_command, predict_command, preflight_command, logs, offers, check):
    for param in command.params:  # every choice (--format, --market) takes any case: JSON, Spot
        if isinstance(param.type, click.Choice):
            param.type.case_sensitive = False
    if command in (run, resume, down, status, leaderboard, import_command, report_command, predict_command, logs):
        command.params.append(db_option())  # these open the store: `benchctl status --db URL` works too
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    from benchctl.errors import BenchctlError
    from benchctl.terminal_text import clean

    debug = os.environ.get("BENCHCTL_DEBUG", "") not in ("", "0") or "--debug" in (argv or sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="benchctl", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted: `benchctl resume` continues where this stopped", err=True)
        sys.exit(130)
    except Exception as exc:
        if not isinstance(exc, (BenchctlError, _provider_error(), _read_only_store())):  # a provider's: exit 1
            raise
        if debug:
            traceback.print_exc()
        from benchctl.report.render import terminal_lines

        # messages quote files and nodes; on a terminal, wrapped to its width
        click.echo(terminal_lines(f"error: {clean(str(exc), newlines=True)}", "  ", sys.stderr), err=True)
        sys.exit(getattr(exc, "exit_code", 1))


def _provider_error() -> type[Exception]:
    """``ProviderError``, imported only once something failed: ``provisioners.base`` brings pydantic,
    which a command that never touches a provider (``--help``, ``status``) should not pay for."""
    from benchctl.provisioners.base import ProviderError

    return ProviderError


def _read_only_store() -> tuple[type[Exception], ...]:
    """``ReadOnlyStore`` (a write to a ``mode=ro`` database) and ``DamagedStore`` (a damaged SQLite
    file), exit 2, only where the store was opened."""
    database = sys.modules.get("benchctl.store.database")
    return (database.ReadOnlyStore, database.DamagedStore) if database is not None else ()
