"""Regenerate docs/report-local.png: run a local campaign (a node whose CPUs span NUMA nodes, one that
fails preflight, a spot node preempted mid-profile), write its report, screenshot it in headless Chromium.

    .venv/bin/python scripts/report_screenshot.py [--keep DIR]

Needs Debian's chromium (/usr/bin/chromium). Takes about a minute on two cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CAMPAIGN = """\
name: local-report-demo
budget_usd: 5
target: {model: nanochat-d2, vocab_size: 8192, target_param_data_ratio: 8.5, total_batch_size: 512}
defaults: {market: on-demand, max_attempts: 2}
payload:
  phases: [preflight, collectives, profile]
  collectives: {min_bytes: 8, max_bytes: 1M, factor: 8, warmup_iters: 2, iters: 5}
  profile: {device_batch_size: 4, sequence_len: 64, warmup_steps: 2, steps: 8}
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.50}
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.00, faults: {numa: split, hosts: 4}}
  - {provider: local, gpu: cpu, count: 2, market: spot, price_usd_per_hour: 0.35, faults: {shm_mb: 64}}
  - {provider: local, gpu: cpu, count: 2, market: spot, price_usd_per_hour: 0.30, env: {NCCL_ALGO: Ring},
     faults: {preempt_at_step: 3, hosts: 4}}
"""


def benchctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BENCHCTL_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("BENCHCTL_DB", None)
    return subprocess.run([sys.executable, "-m", "benchctl", *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=900)


def screenshot(page: Path, png: Path, work: Path, width: int = 1400, height: int = 7000) -> None:
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={work / 'chromium-profile'}", "--force-device-scale-factor=1",
                    f"--screenshot={png}", f"--window-size={width},{height}", page.as_uri()],
                   check=True, capture_output=True, timeout=300)


def trimmed(png: Path, margin: int = 24) -> Image.Image:
    """The screenshot without the white space under the page, as a 256-colour image."""
    image = Image.open(png).convert("RGB")
    grey = image.convert("L").point(lambda v: 255 if v < 250 else 0)
    box = grey.getbbox()
    bottom = min(image.height, (box[3] if box else image.height) + margin)
    return image.crop((0, 0, image.width, bottom)).quantize(colors=256, method=Image.Quantize.MEDIANCUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, help="run the campaign in this folder and keep it")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "report-local.png")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="benchctl-report-"))
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "local-report-demo.yaml"
    spec.write_text(CAMPAIGN)
    ran = benchctl(work / "home", "run", str(spec))
    print(ran.stderr[-3000:], file=sys.stderr)
    made = benchctl(work / "home", "report", "local-report-demo", "--out", str(work / "report"))
    if made.returncode != 0:
        sys.exit(f"benchctl report failed: {made.stderr}")
    raw = work / "report.png"
    screenshot(work / "report" / "index.html", raw, work)
    trimmed(raw).save(args.out, optimize=True)
    print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KiB; report in {work / 'report' / 'index.html'}")


if __name__ == "__main__":
    main()
