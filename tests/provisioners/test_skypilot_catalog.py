"""``SkySDK.price`` through SkyPilot's real catalog code, offline: a small Lambda catalog is seeded
where SkyPilot caches its catalogs (a fresh file is not fetched again), in a subprocess whose
HOME is a temp dir (SkyPilot fixes its paths at import). A small GCP catalog, whose GPUs are billed
apart from the VM, shows a price is one region's whole bill."""

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
from benchctl.provisioners.skypilot.sdk import SkySDK

path = Path(common.get_catalog_path("lambda/vms.csv"))
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,GpuInfo\\n"
                "gpu_8x_h100_sxm5,H100,8,208,1800,23.92,,us-east-1,\\n"
                "gpu_8x_h100_sxm5,H100,8,208,1800,24.5,,us-west-1,\\n"
                "gpu_1x_h100_pcie,H100,1,26,200,2.49,,us-east-1,\\n")
# GCP bills the GPU apart from the VM: the VM is cheaper in us-central1, the T4 in europe-west4
path = Path(common.get_catalog_path("gcp/vms.csv"))
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,"
                "AvailabilityZone\\n"
                "n1-standard-8,,,8,30,,0.38,0.08,us-central1,us-central1-a\\n"
                "n1-standard-8,,,8,30,,0.42,0.09,europe-west4,europe-west4-a\\n"
                ",T4,1,,,,0.40,0.11,us-central1,us-central1-a\\n"
                ",T4,1,,,,0.30,0.12,europe-west4,europe-west4-a\\n")
sdk = SkySDK()
asks = [("lambda", "H100:8", None, False, None), ("lambda", "H100:8", None, False, "us-west-1"),
        ("lambda", "H100:8", None, True, None), ("lambda", None, "gpu_1x_h100_pcie", False, None),
        ("lambda", "A100:8", None, False, None), ("gcp", "T4:1", "n1-standard-8", False, None)]
found = [sdk.prices(cloud, acc, itype, spot, region, None) for cloud, acc, itype, spot, region in asks]
print(json.dumps({"prices": [[[p.instance_type, p.hourly_usd] for p in ps] for ps in found]}))
"""


def test_prices_come_from_skypilots_catalog(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", PROBE], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["prices"] == [
        [["gpu_8x_h100_sxm5", 23.92]],  # the cheapest region when none is given
        [["gpu_8x_h100_sxm5", 24.5]],  # the region's own price
        [],  # Lambda sells no spot
        [["gpu_1x_h100_pcie", 2.49]],  # a pinned instance type
        [],  # nothing fits
        [["n1-standard-8", 0.72]],  # europe-west4's VM + GPU, not 0.38 + 0.30 from two regions
    ]
