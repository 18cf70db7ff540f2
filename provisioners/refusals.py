"""What a download refused, in memory bounded whatever the node sends (``safe_tar``, ``local.file_copy``)."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_LISTED = 100
"""Refusals listed one by one; past these, one summary line counts the rest."""


@dataclass
class Refusals:
    refused: list[str] = field(default_factory=list)
    """At most ``MAX_LISTED`` lines ("name: why"), then one line counting the others."""
    unlisted: int = 0

    def refuse(self, line: str) -> None:
        if len(self.refused) < MAX_LISTED:
            self.refused.append(line)
            return
        self.unlisted += 1
        summary = f"… and {self.unlisted} more refused (the first {MAX_LISTED} are listed)"
        if self.unlisted == 1:
            self.refused.append(summary)
        else:
            self.refused[-1] = summary
