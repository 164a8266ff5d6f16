"""End-to-end checks through a standing rehearsal (filled in below)."""

from __future__ import annotations

from typing import Any


def run_checks(rehearsal: Any) -> str:
    lines = [f"stacks: {list(rehearsal.outputs)}"]
    for name, outputs in rehearsal.outputs.items():
        lines.append(f"{name}: {outputs}")
    lines.append(f"not emulated: {rehearsal.deployment.not_emulated}")
    lines.append(f"notes: {rehearsal.deployment.notes}")
    return "\n".join(lines)
