#!/usr/bin/env python3
"""Fails when a file of the repository cites a document or a source file the repository lacks.

Checked in every tracked (or new, not ignored) file, as `git ls-files` lists them:
  - every relative Markdown link in a .md file, `[text](target)`: the target must exist,
    relative to the linking file, and an #anchor into a .md file must name one of its
    headings;
  - every path to a .md file written anywhere (a comment, a string, prose): with a
    folder (`docs/limits.md`) it must exist relative to the file or to the repository's
    root; a bare name (`README.md`) must be some file's name in the repository. An
    absolute path to a .md file is never one of the repository's;
  - every path with a folder to a source file (.cpp, .hpp, .ipp, .lua, .py, .sh, .cmake),
    as comments and build files name them (`store/limiter_script.hpp`, `${SRC}/net/cidr.cpp`):
    it must exist relative to the file, the root, src/ or tests/. A `${VAR}/` prefix is
    dropped, `#include <...>` lines are a library's, and `generated/` is the build's.
Prints each problem as FILE:LINE: TARGET (why); exits 1 if there is any.
Usage: check_doc_refs.py [REPO_ROOT]"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = (Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent.parent).resolve()
URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s)>\]\"'`]+")
LINK = re.compile(r"\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
# A path ending in .md, not glued to what comes before it (so "*.md" and "{name}.md" are
# not paths); a leading "/" makes it absolute.
MD_PATH = re.compile(r"(?<![\w.:/~$}*-])(/?(?:\.{1,2}/|[\w.-]+/)*[\w.-]*\w\.md)(?![\w/-])")
SOURCE_PATH = re.compile(r"(?<![\w.:/~$*<-])((?:\.{1,2}/|[\w.-]+/)+[\w.-]*\w\.(?:cpp|hpp|ipp|lua|py|sh|cmake))(?![\w/-])")
CMAKE_VAR = re.compile(r"\$\{\w+\}/")
SYSTEM_INCLUDE = re.compile(r"^\s*#\s*include\s*<")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def listed_files():
    """The repository's files: tracked ones and new ones git does not ignore."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        names = sorted({n for n in out.decode().split("\0") if n})
        return [ROOT / n for n in names]
    except (OSError, subprocess.CalledProcessError):
        # Not a checkout (a source tarball): every file but build trees and dot-folders.
        return sorted(p for p in ROOT.rglob("*") if p.is_file() and not any(
            part.startswith((".", "build")) or part == "__pycache__" for part in p.relative_to(ROOT).parts[:-1]))


def text_of(path):
    try:
        data = path.read_bytes()
    except OSError:
        return None  # listed but deleted in the work tree
    if b"\0" in data[:8192]:
        return None  # binary
    return data.decode("utf-8", errors="replace")


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, out, fence = {}, set(), False
        for line in (text_of(path) or "").splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fence = not fence
                continue
            if fence:
                continue
            out.update(HTML_ANCHOR.findall(line))
            if m := HEADING.match(line):
                s = slug(m.group(1))
                out.add(s if s not in seen else f"{s}-{seen[s]}")
                seen[s] = seen.get(s, 0) + 1
        _anchors[path] = out
    return _anchors[path]


def inside(path):
    try:
        path.resolve().relative_to(ROOT)
        return True
    except ValueError:
        return False


def check_link(path, target):
    """Why a Markdown link's target is missing, or None."""
    file, _, anchor = target.partition("#")
    if file.startswith("/"):
        dest = ROOT / file.lstrip("/")
    else:
        dest = path.parent / file if file else path
    if not inside(dest):
        return "outside the repository"
    if not dest.exists():
        return "does not exist"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{dest.resolve().relative_to(ROOT)} has no heading #{anchor}"
    return None


def check_path(path, token, names):
    """Why a written path to a .md file is missing, or None."""
    if token.startswith("/"):
        return "an absolute path, not a file of the repository"
    if "/" not in token.strip("./") and not token.startswith("."):
        return None if token in names else "no file of the repository has this name"
    for base in (path.parent, ROOT):
        if inside(base / token) and (base / token).exists():
            return None
    return "does not exist"


def check_source(path, token):
    """Why a written path to a source file is missing, or None."""
    if token.startswith("generated/"):
        return None  # written by the build (src/CMakeLists.txt)
    for base in (path.parent, ROOT, ROOT / "src", ROOT / "tests"):
        if inside(base / token) and (base / token).exists():
            return None
    return "no such source file"


def main():
    files = listed_files()
    names = {f.name for f in files}
    problems, checked = [], 0
    for path in files:
        text = text_of(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT)
        fence = False
        for n, line in enumerate(text.splitlines(), 1):
            plain = URL.sub(" ", line)
            found = set()
            if path.suffix == ".md":
                if line.lstrip().startswith(("```", "~~~")):
                    fence = not fence
                elif not fence:
                    for target in LINK.findall(re.sub(r"`[^`]*`", "", plain)):
                        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                            continue  # mailto: and the like
                        checked += 1
                        found.add(target.partition("#")[0])
                        if why := check_link(path, target):
                            problems.append(f"{rel}:{n}: {target} ({why})")
            for token in MD_PATH.findall(plain):
                if token in found:
                    continue
                found.add(token)
                checked += 1
                if why := check_path(path, token, names):
                    problems.append(f"{rel}:{n}: {token} ({why})")
            if SYSTEM_INCLUDE.match(plain):
                continue
            for token in SOURCE_PATH.findall(CMAKE_VAR.sub("", plain)):
                if token in found:
                    continue
                found.add(token)
                checked += 1
                if why := check_source(path, token):
                    problems.append(f"{rel}:{n}: {token} ({why})")
    for p in problems:
        print(p)
    print(f"{checked} references to documents and source files checked in {len(files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
