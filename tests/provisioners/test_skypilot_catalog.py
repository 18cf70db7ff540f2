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
# GCP bills the GPU apart from the VM. n1-standard-8 and T4 (made up): the VM is cheaper in us-central1, the T4
# in europe-west4. a3-megagpu-8g, its H100-MEGA and a3-highgpu-8g's H100: real rows, unchanged
# (fixtures/skypilot_catalog/README.md)
path = Path(common.get_catalog_path("gcp/vms.csv"))
path.parent.mkdir(parents=True, exist_ok=True)
mem = "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]}"
path.write_text("InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,"
                "Price,SpotPrice\\n"
                "n1-standard-8,8,30,,,,us-central1,us-central1-a,0.38,0.08\\n"
                "n1-standard-8,8,30,,,,europe-west4,europe-west4-a,0.42,0.09\\n"
                ",,,T4,1,,us-central1,us-central1-a,0.40,0.11\\n"
                ",,,T4,1,,europe-west4,europe-west4-a,0.30,0.12\\n"
                "a3-megagpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.88933\\n"
                "a3-megagpu-8g,208.0,1872.0,,,,us-east4,us-east4-a,9.46006,2.15966\\n"
                f",,,H100,8,{mem},us-central1,us-central1-a,33.60609,23.9408\\n"
                f",,,H100-MEGA,8,{mem},us-central1,us-central1-a,82.75421,25.2808\\n"
                f",,,H100-MEGA,8,{mem},us-east4,us-east4-a,82.75424,14.8952\\n")
sdk = SkySDK()
asks = [("lambda", "H100:8", None, False, None), ("lambda", "H100:8", None, False, "us-west-1"),
        ("lambda", "H100:8", None, True, None), ("lambda", None, "gpu_1x_h100_pcie", False, None),
        ("lambda", "A100:8", None, False, None), ("gcp", "T4:1", "n1-standard-8", False, None),
        ("gcp", "H100:8", "a3-megagpu-8g", False, None), ("gcp", "H100:8", "a3-megagpu-8g", True, None)]
found = [sdk.prices(cloud, acc, itype, spot, region, None) for cloud, acc, itype, spot, region in asks]
print(json.dumps({"prices": [[[p.instance_type, p.hourly_usd, p.accelerators] for p in ps] for ps in found]}))
"""


def test_prices_come_from_skypilots_catalog(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", PROBE], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["prices"] == [
        [["gpu_8x_h100_sxm5", 23.92, "H100:8"]],  # the cheapest region when none is given
        [["gpu_8x_h100_sxm5", 24.5, "H100:8"]],  # the region's own price
        [],  # Lambda sells no spot
        [["gpu_1x_h100_pcie", 2.49, "H100:1"]],  # a pinned instance type
        [],  # nothing fits
        [["n1-standard-8", 0.72, None]],  # europe-west4's VM + GPU, not 0.38 + 0.30 from two regions
        # a3-megagpu-8g bills its own H100-MEGA, 9.46006 + 82.75421 in us-central1, where pricing the cell's
        # "H100:8" gave 9.46006 + 33.60609 = 43.07 (a3-highgpu-8g's GPUs: half the bill)
        [["a3-megagpu-8g", 9.46006 + 82.75421, "H100-MEGA:8"]],
        [["a3-megagpu-8g", 2.15966 + 14.8952, "H100-MEGA:8"]],  # spot: us-east4's
    ]
