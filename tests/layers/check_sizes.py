#!/usr/bin/env python3
"""Fails when a file under src/ is over 500 lines or a function defined in it is over
80 (CONTRIBUTING.md, "Sizes"). A function is counted from its first line to the
brace that closes it, at the indentation its definition starts with.
Usage: check_sizes.py [SRC_DIR]"""
import re
import sys
from pathlib import Path

SRC = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent.parent / "src"
MAX_FILE, MAX_FUNCTION = 500, 80
NOT_FUNCTION = re.compile(r"^\s*(namespace|struct|class|enum|union|extern|template\s*<[^>]*>\s*(struct|class))\b|=\s*\{?$|^\s*#")
OPENS = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>, ]+)?\s*\{\s*$|^\s*[\w:~<>]+\([^;]*\)\s*:\s")


def functions(lines):
    """(name line, length) of each function definition whose body opens at the end of a line."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if OPENS.search(line) and not NOT_FUNCTION.search(line) and not line.strip().startswith(("if", "for", "while", "switch", "else", "do", "}", "return", "auto [")):
            indent = len(line) - len(line.lstrip())
            # The definition may start a few lines up (wrapped parameters).
            start = i
            while start > 0 and lines[start - 1].strip() and not lines[start - 1].rstrip().endswith((";", "}", "{", ":")) \
                    and not lines[start - 1].lstrip().startswith(("//", "#")) and i - start < 6:
                start -= 1
            indent = min(indent, len(lines[start]) - len(lines[start].lstrip()))
            j = i + 1
            while j < len(lines) and not (lines[j].startswith(" " * indent + "}") and
                                          (len(lines[j]) - len(lines[j].lstrip())) == indent):
                j += 1
            yield start + 1, j - start + 1, lines[start].strip()
            i = j + 1
            continue
        i += 1


def main():
    problems = []
    for f in sorted(SRC.rglob("*")):
        if f.suffix not in (".cpp", ".hpp", ".ipp"):
            continue
        lines = f.read_text(errors="replace").splitlines()
        rel = f.relative_to(SRC)
        if len(lines) > MAX_FILE:
            problems.append(f"{rel}: {len(lines)} lines (at most {MAX_FILE})")
        for at, n, text in functions(lines):
            if n > MAX_FUNCTION:
                problems.append(f"{rel}:{at}: a function of {n} lines (at most {MAX_FUNCTION}): {text[:70]}")
    for p in problems:
        print(p)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
