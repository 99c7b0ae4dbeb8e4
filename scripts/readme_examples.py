"""Regenerate the README's example outputs from real runs.

Each example in README.md is a marker line `<!-- plan3d-output columns=N: plan3d ARGS -->`
followed by a ```text block; this script runs `plan3d ARGS` at N columns and writes its stdout
(trailing spaces stripped) into the block. tests/test_ux.py checks that every block matches.

    python scripts/readme_examples.py            # rewrite README.md
    python scripts/readme_examples.py --check    # exit 1 if a block is stale
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"
MARKER = re.compile(r"<!-- plan3d-output columns=(\d+): (plan3d [^>]*?) -->\n```text\n(.*?)```",
                    re.S)


def run(columns: int, command: str) -> str:
    """The command's stdout at that width, as the README shows it."""
    args = shlex.split(command)[1:]
    env = {**os.environ, "COLUMNS": str(columns), "PLAN3D_NO_CACHE": "1"}
    out = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True,
                         text=True, env=env).stdout
    return "\n".join(line.rstrip() for line in out.splitlines()).rstrip() + "\n"


def examples(text: str):
    """(columns, command, block text) of each example."""
    return [(int(m.group(1)), m.group(2), m.group(3)) for m in MARKER.finditer(text)]


def main() -> int:
    text = README.read_text("utf-8")

    def fresh(m):
        return (f"<!-- plan3d-output columns={m.group(1)}: {m.group(2)} -->\n```text\n"
                f"{run(int(m.group(1)), m.group(2))}```")

    new = MARKER.sub(fresh, text)
    if "--check" in sys.argv:
        return int(new != text)
    README.write_text(new, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
