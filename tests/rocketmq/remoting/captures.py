"""The vendored captures of RocketMQ 4.9.4 remoting traffic (tests/fixtures/remoting-4.9,
README there): each frame's raw bytes and what the capture decoded of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "remoting-4.9"
SCENARIOS = sorted(p.name for p in ROOT.iterdir() if p.is_dir())


@dataclass(frozen=True)
class Frame:
    scenario: str
    info: dict[str, Any]
    raw: bytes  # the whole frame, length field included

    @property
    def code(self) -> int:
        return int(self.info["code"])

    @property
    def link(self) -> str:
        return str(self.info["link"])

    @property
    def is_request(self) -> bool:
        return self.info["kind"] == "request"


def frames(scenario: str | None = None) -> Iterator[Frame]:
    for name in [scenario] if scenario else SCENARIOS:
        folder = ROOT / name
        bins: dict[str, bytes] = {}
        for line in (folder / "frames.jsonl").read_text().splitlines():
            info = json.loads(line)
            data = bins.get(info["bin"])
            if data is None:
                data = bins[info["bin"]] = (folder / info["bin"]).read_bytes()
            off = int(info["bin_offset"])
            yield Frame(name, info, data[off : off + 4 + int(info["frame_len"])])


def streams() -> Iterator[tuple[str, bytes]]:
    """Every captured direction of every connection: (name, bytes), whole frames back to back."""
    for name in SCENARIOS:
        for p in sorted((ROOT / name).glob("*.bin")):
            yield f"{name}/{p.name}", p.read_bytes()
