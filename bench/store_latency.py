#!/usr/bin/env python3
"""The memory store's decision latency with a large store (bench/store_latency.cpp),
for this checkout and, with --before REV, for another commit built beside it (a git
worktree under /tmp with this bench program copied in), one after the other, each
size in turn, so that both meet the same machine.

    bench/store_latency.py [--before REV] [--seconds 5] KEYS...   (e.g. 1000000 10000000)

Prints a line per build and size (p50, p99, p99.9, max in microseconds)."""
import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = "floodgate-store-bench"
SNIPPET = f"""
add_executable({TARGET} EXCLUDE_FROM_ALL ${{PROJECT_SOURCE_DIR}}/bench/store_latency.cpp)
target_link_libraries({TARGET} PRIVATE floodgate_core)
if(FG_JEMALLOC AND NOT FG_SANITIZE)
  target_link_libraries({TARGET} PRIVATE ${{FG_JEMALLOC_LIB}})
endif()
"""


def build(tree, build_dir):
    if not (build_dir / "build.ninja").exists():
        subprocess.run(["cmake", "-S", str(tree), "-B", str(build_dir), "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", str(build_dir), TARGET], check=True, stdout=subprocess.DEVNULL)
    return build_dir / "tests" / TARGET


def worktree(rev):
    tree = Path(f"/tmp/fg-store-bench-{rev}")
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                       stdout=subprocess.DEVNULL)
    shutil.copy(ROOT / "bench" / "store_latency.cpp", tree / "bench" / "store_latency.cpp")
    cmake = tree / "tests" / "CMakeLists.txt"
    subprocess.run(["git", "-C", str(tree), "checkout", "--", "tests/CMakeLists.txt"], check=True)
    if TARGET not in cmake.read_text():
        cmake.write_text(cmake.read_text() + SNIPPET)
    return tree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="a commit to measure beside this checkout")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("keys", nargs="+", type=int)
    args = ap.parse_args()
    builds = []
    if args.before:
        tree = worktree(args.before)
        builds.append((args.before, build(tree, tree / "build")))
    builds.append(("this checkout", build(ROOT, ROOT / "build")))
    for keys in args.keys:
        for name, binary in builds:
            out = subprocess.run([str(binary), str(keys), str(args.seconds)], capture_output=True, text=True,
                                 check=True).stdout.strip()
            print(f"{name}: {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
