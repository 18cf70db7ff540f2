"""``benchctl report``: one self-contained HTML page of a campaign (or of every campaign)."""

from __future__ import annotations

from pathlib import Path

import click

from benchctl.cli.options import CliState, pass_state


@click.command("report")
@click.argument("campaign", required=False)
@click.option("--out", "out_dir", required=True, metavar="DIR", type=click.Path(path_type=Path),
              help="Folder for index.html (created; an older index.html is replaced).")
@pass_state
def report_command(state: CliState, campaign: str | None, out_dir: Path) -> None:
    """Write DIR/index.html: plots, leaderboard, preflight verdicts and spend of CAMPAIGN.

    Without CAMPAIGN the page has one section per campaign in the store, after a table of contents
    and a ranking of every cell with a result across the campaigns (one table per model). The page fetches
    nothing: its CSS and figures (SVG) are inline, so it can be mailed or archived as one file.
    """
    import time

    from benchctl.errors import CampaignNotFound, UsageError
    from benchctl.store import queries as q

    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir} is a file: give a folder to write index.html into")
    engine = state.engine()
    camps = q.campaigns(engine, campaign)
    if campaign is not None and not camps:
        raise CampaignNotFound(f"no campaign named {campaign!r} in the store; `benchctl status` lists them")
    if not camps:
        raise CampaignNotFound("no campaigns in the store yet: run one with `benchctl run FILE`, then report it")
    from benchctl.report.data import campaign_data  # matplotlib and the page: only once the input is good
    from benchctl.report.html import page, write_page
    from benchctl.report.plots import figures

    now = time.time()
    sections = []
    for index, camp in enumerate(camps):
        data = campaign_data(engine, camp.name, now)
        sections.append((data, figures(data, f"c{index}")))
    try:
        path = write_page(out_dir, page(sections, now, overview=campaign is None))
    except OSError as exc:
        raise UsageError(f"cannot write {out_dir / 'index.html'}: {exc.strerror or exc}: choose another --out "
                         f"folder") from None
    click.echo(str(path))
