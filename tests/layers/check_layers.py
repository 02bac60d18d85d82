#!/usr/bin/env python3
"""Fails when a file under src/ includes a header from a folder its layer may not use
(the allowed graph is src/layers.txt), or when a listed known violation no
longer exists. Usage: check_layers.py [SRC_DIR] [LAYERS_FILE]"""
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent.parent / "src"
LAYERS = Path(sys.argv[2]) if len(sys.argv) > 2 else SRC / "layers.txt"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def read_layers(path):
    allowed, known = {}, set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("known:"):
            a, b = (x.strip() for x in line[len("known:"):].split("->"))
            known.add((a, b))
            continue
        folder, _, deps = line.partition(":")
        allowed[folder.strip()] = set(deps.split())
    return allowed, known


def main():
    allowed, known = read_layers(LAYERS)
    seen = {}
    problems = []
    for f in sorted(SRC.rglob("*")):
        if f.suffix not in (".cpp", ".hpp", ".ipp") or f.parent == SRC:
            continue
        folder = f.relative_to(SRC).parts[0]
        if folder not in allowed:
            problems.append(f"{f.relative_to(SRC)}: folder '{folder}' is not in {LAYERS.name}")
            continue
        for m in INCLUDE.finditer(f.read_text(errors="replace")):
            dep = m.group(1)
            if dep == folder or not (SRC / dep).is_dir():
                continue
            seen.setdefault((folder, dep), []).append(str(f.relative_to(SRC)))
    for (a, b), files in sorted(seen.items()):
        if b in allowed[a] or (a, b) in known:
            continue
        problems.append(f"{a} -> {b} is not allowed ({LAYERS.name}): " + ", ".join(files))
    for a, b in sorted(known - set(seen)):
        problems.append(f"known violation {a} -> {b} no longer exists: remove it from {LAYERS.name}")
    for p in problems:
        print(p)
    edges = len(seen)
    print(f"{edges} folder edges checked, {len(known & set(seen))} known violations, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
