"""An SSH node whose artifact download stalls: a real sshd on 127.0.0.1 whose ``ForceCommand``
answers every ``tar -cf -`` (the controller's download) with the first 512 bytes of a tar (the
header of a 1 MB file) and then nothing for ``STALL_S`` seconds; every other command runs as asked.
That is what a node with a replaced ``tar`` (or a dying link) does."""

from __future__ import annotations

import io
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.fakes.sshd import SSHServer, running_sshd

STALL_S = 30

CAMPAIGN = """\
name: stall
budget_usd: {budget}
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 1}}
payload:
  phases: [command]
  command: {{run: "true"}}
providers:
  ssh:
    nodes:
      - {{name: box, host: {host}, port: {port}, user: {user}, key: "{key}", gpu: cpu, count: 1,
         price_usd_per_hour: 0.5, python: "{python}", workdir: "{work}"}}
matrix:
  - {{provider: ssh, gpu: cpu, count: 1}}
"""


@contextmanager
def stalling_sshd(root: Path) -> Iterator[SSHServer]:
    root.mkdir(parents=True, exist_ok=True)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        member = tarfile.TarInfo("artifacts/big.bin")
        member.size = 1 << 20
        tar.addfile(member, io.BytesIO(bytes(member.size)))
    (root / "head.tar").write_bytes(archive.getvalue()[:512])
    wrapper = root / "node.sh"
    wrapper.write_text(f"""#!/bin/sh
case "$SSH_ORIGINAL_COMMAND" in
  *"-cf -"*) cat {root / 'head.tar'}; exec sleep {STALL_S} ;;
esac
exec sh -c "$SSH_ORIGINAL_COMMAND"
""")
    wrapper.chmod(0o755)
    with running_sshd(root / "sshd", extra_config=f"ForceCommand {wrapper}\n") as server:
        yield server


def stall_campaign(path: Path, server: SSHServer, work: Path, budget: float = 5) -> Path:
    path.write_text(CAMPAIGN.format(budget=budget, host=server.host, port=server.port, user=server.user,
                                    key=server.key, python=sys.executable, work=work))
    return path
