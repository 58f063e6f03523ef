"""Lines per source file (STYLE: aim <= 500, look again at > 800); fails past 1,000 lines.

Usage: python tools/sz.py [--all]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LIMIT = 1000
ALLOW: set[str] = set()  # files allowed past LIMIT, each with a reason in a comment
SUFFIXES = {".py", ".cpp", ".h", ".cu", ".cmake", ".txt"}


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True)
    sizes = []
    for name in files.stdout.split():
        path = root / name
        if path.suffix in SUFFIXES and path.is_file():
            sizes.append((sum(1 for _ in path.open(encoding="utf-8", errors="replace")), name))
    sizes.sort(reverse=True)
    for n, name in sizes if "--all" in sys.argv else sizes[:15]:
        print(f"{n:6d}  {name}")
    over = [(n, name) for n, name in sizes if n > LIMIT and name not in ALLOW]
    for n, name in over:
        print(f"sz: {name} has {n} lines (> {LIMIT}); split it or add it to ALLOW with a reason")
    print(f"sz: {sum(n for n, _ in sizes)} lines in {len(sizes)} files")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
