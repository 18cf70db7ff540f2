"""``benchctl leaderboard``: cost-to-train per cell across campaigns, cheapest first within each
model and target."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from benchctl.cli.options import CliState, pass_state

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from benchctl.results.leaderboard import Filters

_FORMATS = click.Choice(["table", "json", "csv", "md"], case_sensitive=False)
TERMINAL_ROWS = 50
"""Rows a table on a terminal shows without ``--all`` (a pipe, json, csv and md get every row)."""


@click.command()
@click.option("--campaign", "campaigns", multiple=True, help="Only this campaign (repeatable).")
@click.option("--provider", "providers", multiple=True, help="Only this provider (repeatable).")
@click.option("--market", "markets", multiple=True, type=click.Choice(["spot", "on-demand"], case_sensitive=False),
              help="Only this market (repeatable).")
@click.option("--model", "models", multiple=True, help="Only results for this target model, e.g. nanochat-d26.")
@click.option("--top", type=click.IntRange(min=1), metavar="N", help="Only the N cheapest of each model and target.")
@click.option("--wide", is_flag=True, help="table/md: every column (the default fits 100 columns).")
@click.option("--columns", metavar="A,B,...", help="table/md: these columns, in this order (names: "
              "docs/leaderboard.md, or any unknown one lists them).")
@click.option("--all", "every", is_flag=True, help=f"table on a terminal: every row (default: the first "
              f"{TERMINAL_ROWS}, then how many more).")
@click.option("--predicted", is_flag=True, help="Predicted vs measured step time per cell and the error, each "
              "cell predicted with its own measurement held out of the calibration (docs/predict.md).")
@click.option("--format", "fmt", type=_FORMATS, default="table", show_default=True)
@pass_state
def leaderboard(state: CliState, campaigns: tuple[str, ...], providers: tuple[str, ...], markets: tuple[str, ...],
                models: tuple[str, ...], top: int | None, wide: bool, columns: str | None, every: bool,
                predicted: bool, fmt: str) -> None:
    """Cost-to-train per cell across campaigns, ranked cheapest first among the cells of the same
    model and target (filters ignore case)."""
    from benchctl.results.leaderboard import Filters

    shown = table_columns(wide, columns, fmt.lower())
    if predicted and (wide or columns is not None):
        from benchctl.errors import UsageError

        raise UsageError("--predicted shows its own columns; give it without --wide and --columns")
    print_leaderboard(state.engine(), Filters(campaigns=campaigns, providers=providers, markets=markets,
                                              models=models), fmt.lower(),
                      columns=shown if wide or columns is not None else None, top=top, every=every,
                      predicted=predicted)


def table_columns(wide: bool, columns: str | None, fmt: str) -> tuple[str, ...]:
    """The headers ``table``/``md`` show: NARROW_COLUMNS, every one (``wide``), or those ``columns``
    names (by name or header, any case). Bad input raises UsageError."""
    from benchctl.errors import UsageError
    from benchctl.results.leaderboard import NARROW_COLUMNS, TABLE, TABLE_COLUMNS

    if columns is not None and wide:
        raise UsageError("give --wide or --columns, not both")
    if (columns is not None or wide) and fmt in ("json", "csv"):
        raise UsageError(f"--wide and --columns choose table and md columns; {fmt} always carries every column")
    names = ", ".join(name for name, _ in TABLE)
    if columns is None:
        return TABLE_COLUMNS if wide else NARROW_COLUMNS
    by_name = {key.lower(): header for name, header in TABLE for key in (name, header)}
    picked = [part.strip() for part in columns.split(",") if part.strip()]
    for part in picked:
        if part.lower() not in by_name:
            raise UsageError(f"unknown column {part!r} in --columns; known: {names}")
    if not picked:
        raise UsageError(f"--columns is empty; known: {names}")
    return tuple(dict.fromkeys(by_name[part.lower()] for part in picked))


def print_leaderboard(engine: Engine, filters: Filters | str | None, fmt: str,
                      columns: tuple[str, ...] | None = None, top: int | None = None, every: bool = False,
                      predicted: bool = False) -> None:
    """``filters``: a campaign name, or Filters (None: everything). ``columns``: the table/md
    headers (default NARROW_COLUMNS piped and in md, on a terminal as many of TERMINAL_PRIORITY as
    fit its width); ``top``: the N best ranks of each model and target.
    A table on a terminal shows the first TERMINAL_ROWS rows and says how many more (``every``: all).
    A filter value that matches nothing in the store raises UsageError naming the known values.
    ``predicted``: the rows' held-out predictions too (``print_predicted``)."""
    import sys

    from benchctl.errors import UsageError
    from benchctl.report.render import render
    from benchctl.results.leaderboard import (
        COLUMNS,
        NARROW_COLUMNS,
        TABLE_COLUMNS,
        TERMINAL_PRIORITY,
        Filters,
        display_row,
        filters_text,
        leaderboard_rows,
        rank_group,
        ranked_part,
        unmatched_filter,
    )

    if not isinstance(filters, Filters):
        filters = Filters(campaigns=[filters] if filters else [])
    limit = TERMINAL_ROWS if fmt == "table" and not every and sys.stdout.isatty() else None
    more = 0
    if top is None and limit is None:  # every row shown: read every row
        rows = leaderboard_rows(engine, filters=filters)
        groups = {rank_group(r) for r in rows if r["rank"] is not None}
    else:  # a part shown: ranked in SQL as far as it can be, the whole rows of that part only read
        part = ranked_part(engine, filters, top, limit)
        more, groups = part.more, part.groups
        rows = leaderboard_rows(engine, filters=filters, only=part.rows)
    if not rows:
        miss = unmatched_filter(engine, filters)
        if miss:
            raise UsageError(miss)
    if predicted and rows:
        print_predicted(engine, rows, fmt)
    elif fmt in ("json", "csv"):
        click.echo(render(rows, COLUMNS, fmt))
    elif not rows:
        given = filters_text(filters)
        click.echo(f"no results match {given}" if given else "no results yet: run a campaign with `benchctl run FILE`")
    else:
        several = {m for m, _, _ in groups if m is not None and len({g[1] for g in groups if g[0] == m}) > 1}
        mixed = {m for m, _, _ in groups if m is not None and len({g[2] for g in groups if g[0] == m}) > 1}
        title = "cost-to-train, ranked within each model, target and precision"
        if len(groups) == 1:
            ((model, steps, precision),) = groups
            title = f"cost-to-train of {model or 'the target'} over {steps:,} target steps"
            title += f", {precision} matmuls" if precision else ""
        click.echo(render([display_row(r, with_steps=r["model"] in several, with_precision=r["model"] in mixed)
                           for r in rows],
                          columns or NARROW_COLUMNS, fmt, title=title,
                          terminal=None if columns else TABLE_COLUMNS,
                          keep=(*TERMINAL_PRIORITY[:3], "model", *TERMINAL_PRIORITY[3:]) if several or mixed
                          or len({g[0] for g in groups}) > 1 else TERMINAL_PRIORITY))
        if more > 0:
            click.echo(f"… {more:,} more rows: --all shows every one, --top N the N cheapest of each model and "
                       "target, --format csv all of them for a file")


PREDICTED_COLUMNS = ("rank", "model", "configuration", "step ms", "predicted ms (held out)", "error")
"""``--predicted``'s table: narrow, the measured and the held-out predicted step time side by side
(the model names its precision where the rows have several)."""


def print_predicted(engine: Engine, rows: list[dict[str, Any]], fmt: str) -> None:
    """``rows`` with ``predicted_step_ms`` and ``prediction_error`` (``benchctl.predict.held_out``):
    JSON/CSV carry them beside every key; table/md show PREDICTED_COLUMNS and a line with the
    geomean error over the rows shown."""
    from benchctl.predict.held_out import COLUMNS as PREDICTED
    from benchctl.predict.held_out import add_predictions, summary
    from benchctl.report.render import render
    from benchctl.results.leaderboard import COLUMNS, display_row

    add_predictions(engine, rows)
    if fmt in ("json", "csv"):
        click.echo(render(rows, (*COLUMNS, *PREDICTED), fmt))
        return
    mixed = len({row.get("precision") for row in rows if row["predicted_step_ms"] is not None}) > 1
    shown = [{**display_row(row, with_precision=mixed),
              "predicted ms (held out)": "-" if row["predicted_step_ms"] is None
              else f"{row['predicted_step_ms']:,.1f}",
              "error": "-" if row["prediction_error"] is None else f"{row['prediction_error']:+.1%}"}
             for row in rows]
    click.echo(render(shown, PREDICTED_COLUMNS, fmt, title="step time, measured vs predicted (each cell held out)"))
    click.echo(summary(rows))
