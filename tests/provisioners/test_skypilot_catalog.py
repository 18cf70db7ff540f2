"""``SkySDK.price`` through SkyPilot's real catalog code, offline: a small Lambda catalog is seeded
where SkyPilot caches its catalogs (a fresh file is not fetched again), in a subprocess whose
HOME is a temp dir (SkyPilot fixes its paths at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PROBE = """\
import json
from pathlib import Path
from sky.catalog import common
from provisioners.skypilot_sdk import SkySDK

path = Path(common.get_catalog_path("lambda/vms.csv"))
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,GpuInfo\\n"
                "gpu_8x_h100_sxm5,H100,8,208,1800,23.92,,us-east-1,\\n"
                "gpu_8x_h100_sxm5,H100,8,208,1800,24.5,,us-west-1,\\n"
                "gpu_1x_h100_pcie,H100,1,26,200,2.49,,us-east-1,\\n")
sdk = SkySDK()
asks = [("H100:8", None, False, None), ("H100:8", None, False, "us-west-1"), ("H100:8", None, True, None),
        (None, "gpu_1x_h100_pcie", False, None), ("A100:8", None, False, None)]
found = [sdk.price("lambda", acc, itype, spot, region, None) for acc, itype, spot, region in asks]
print(json.dumps({"prices": [[p.instance_type, p.hourly_usd] if p else None for p in found],
                  "ssh_config": str(sdk.ssh_config("bc-c--bc-1"))}))
"""


def test_prices_come_from_skypilots_catalog(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", PROBE], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["prices"] == [
        ["gpu_8x_h100_sxm5", 23.92],  # the cheapest region when none is given
        ["gpu_8x_h100_sxm5", 24.5],  # the region's own price
        None,  # Lambda sells no spot
        ["gpu_1x_h100_pcie", 2.49],  # a pinned instance type
        None,  # nothing fits
    ]
    assert answer["ssh_config"] == str(tmp_path / ".sky" / "generated" / "ssh" / "bc-c--bc-1"), \
        "the alias file SkyPilot writes for a cluster"
