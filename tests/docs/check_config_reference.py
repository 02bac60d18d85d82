#!/usr/bin/env python3
"""The documentation against the code, so that the two cannot drift apart.

    check_config_reference.py SOURCE_DIR FLOODGATE_BIN

1. The configuration reference (docs/configuration.md, its tables whose first column is
   a key's full path in backticks) against the loader (src/config/*.cpp):
   - every key the loader reads (each `.get("...")` on a yaml_reader object, placed in
     its section by the function and object it is read in) has a row, and every row
     names a key the loader reads;
   - every row has a default: a value in backticks, or `required` / `none` / `derived`
     with an example (`e.g. `value``);
   - a file that sets each key to its documented default (or example) passes
     `floodgate --check`: one file per section (top level, upstreams, routes), and when
     one is refused, one file per key of it, to name the rows at fault.
2. The layer table in docs/architecture.md (its "may include" column) lists exactly what
   src/layers.txt allows each folder.
3. Every relative link in README.md and docs/*.md (and tests/fuzz/README.md) leads to a
   file that exists, and its #anchor, if any, to a heading of that file.

Plain python3; prints what it checked, and exits 1 with the list of problems."""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# Where the loader reads each section: (file, function, object) -> the keys' path prefix.
# A .get("...") anywhere else is a problem until it is added here (and documented).
SECTIONS = {
    ("loader.cpp", "load", "top"): "",
    ("loader.cpp", "load", "o"): "memory.",
    ("loader.cpp", "admin", "o"): "admin.",
    ("loader.cpp", "log", "o"): "log.",
    ("loader.cpp", "redis", "o"): "redis.",
    ("loader.cpp", "liveness", "o"): "redis.",
    ("loader.cpp", "client_ip", "o"): "client_ip.",
    ("loader.cpp", "http", "o"): "http.",
    ("loader.cpp", "http2", "o"): "http2.",
    ("loader.cpp", "tracing", "o"): "tracing.",
    ("loader.cpp", "span_export", "o"): "tracing.export.",
    ("loader.cpp", "resolver", "o"): "resolver.",
    ("loader.cpp", "tls", "o"): "tls.",
    ("loader.cpp", "certificate", "co"): "tls.certificates[].",
    ("upstream_loader.cpp", "fill", "o"): "upstreams.<name>.",
    ("upstream_loader.cpp", "server", "so"): "upstreams.<name>.servers[].",
    ("upstream_loader.cpp", "eject", "o"): "upstreams.<name>.eject.",
    ("upstream_loader.cpp", "budget", "o"): "upstreams.<name>.retry_budget.",
    ("upstream_loader.cpp", "health", "o"): "upstreams.<name>.health.",
    ("upstream_loader.cpp", "tls", "o"): "upstreams.<name>.tls.",
    ("route_loader.cpp", "routes", "o"): "routes[].",
    ("route_loader.cpp", "match", "o"): "routes[].match.",
    ("route_loader.cpp", "response", "o"): "routes[].response.",
    ("route_loader.cpp", "limits", "o"): "routes[].limits[].",
    ("route_loader.cpp", "calendar", "o"): "routes[].limits[].",
    ("route_loader.cpp", "on_exceed", "o"): "routes[].limits[].",
    ("plan_loader.cpp", "load_plans", "o"): "routes[].limits[].plans.",
    ("plan_loader.cpp", "plan", "po"): "routes[].limits[].plans.<plan>.",
}

# The smallest valid file; each run adds to it.
BASE_UPSTREAM = {"address": '"127.0.0.1:9000"'}
BASE_ROUTE = {"match": {"path_prefix": "/"}, "upstream": "api"}
# A limit needs its algorithm's own settings beside the key under test.
WINDOW_LIMIT = {"name": "l", "algorithm": "fixed_window", "limit": "10", "window": "1s"}
RATE_LIMIT = {"name": "l", "algorithm": "token_bucket", "rate": "10/s"}
RATE_KEYS = {"rate", "burst"}

FUNC = re.compile(r"^\s*(?:[\w:<>,]+\s+)+(?:\w+::)*(\w+)\([^;]*\)\s*(?:const\s*)?\{")
GET = re.compile(r"\b(\w+)\.get\(\"([^\"]+)\"\)")
KEY_CELL = re.compile(r"^`([a-z][a-z0-9_]*(?:\[\]|\.<name>)?(?:\.(?:[a-z][a-z0-9_]*(?:\[\])?|<plan>))*)`$")


def loader_keys(src, problems):
    """{full key path: 'file:line'} of every key the loader reads."""
    keys = {}
    for path in sorted((src / "src" / "config").glob("*.cpp")):
        func = None
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if m := FUNC.match(line):
                func = m.group(1)
            for obj, key in GET.findall(line):
                where = f"src/config/{path.name}:{n}"
                prefix = SECTIONS.get((path.name, func, obj))
                if prefix is None:
                    problems.append(f"{where}: reads '{key}' from {obj} in {func}(), a section this check does not "
                                    f"know: add it to SECTIONS in {Path(__file__).name} and document its keys")
                    continue
                keys.setdefault(prefix + key, where)
    if len(keys) < 40:
        problems.append(f"found only {len(keys)} keys in src/config/*.cpp: has the way the loader reads keys changed?")
    return keys


def split_row(line):
    cells = re.split(r"(?<!\\)\|", line.strip())
    return [c.strip().replace("\\|", "|") for c in cells[1:-1]]


def tables(path):
    """Each markdown table of a file: (line of its header, header cells, [(line, cells)])."""
    out, cur = [], None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("|"):
            cells = split_row(line)
            if cur is None:
                cur = (n, [c.lower() for c in cells], [])
                out.append(cur)
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                cur[2].append((n, cells))
        else:
            cur = None
    return out


def documented_keys(doc, problems):
    """{key: (line, value to write or None, why not)} of the reference's rows."""
    rows = {}
    for _, header, body in tables(doc):
        if not header or header[0] != "key" or "default" not in header:
            continue
        col = header.index("default")
        for n, cells in body:
            where = f"docs/configuration.md:{n}"
            m = KEY_CELL.match(cells[0]) if cells else None
            if not m:
                problems.append(f"{where}: the first column is not one key's full path in backticks: {cells[:1]}")
                continue
            key = m.group(1)
            if key in rows:
                problems.append(f"{where}: `{key}` has a row already (line {rows[key][0]})")
            default = cells[col] if col < len(cells) else ""
            if d := re.match(r"`([^`]*)`", default):
                rows[key] = (n, d.group(1), None)
            elif re.match(r"(required|none|derived)\b", default):
                e = re.search(r"e\.g\. `([^`]*)`", default)
                rows[key] = (n, e.group(1) if e else None, None if e else f"its default is '{default}', no e.g. value")
            else:
                problems.append(f"{where}: `{key}` has no default (want `value`, or required/none/derived with "
                                f"e.g. `value`): '{default}'")
                rows[key] = (n, None, "no default")
    return rows


def covers(key, documented):
    """A mapping or list the loader reads (`admin`, `routes[].limits`) is documented by its keys' rows."""
    return key in documented or any(d.startswith((key + ".", key + "[]")) for d in documented)


def emit(value, indent=0):
    """YAML text of nested dicts and lists whose leaves are YAML text already."""
    pad = " " * indent
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                out.append(f"{pad}{k}:")
                out.append(emit(v, indent + 2))
            else:
                out.append(f"{pad}{k}: {v}")
    else:
        for item in value:
            body = emit(item, indent + 2).split("\n")
            out.append(f"{pad}- {body[0].lstrip()}")
            out.extend(body[1:])
    return "\n".join(out)


def upstream_for(rest, value):
    """An upstream that sets one of its keys (`eject.failures`, `servers[].weight`)."""
    up = dict(BASE_UPSTREAM)
    if rest.startswith("servers[]."):
        del up["address"]  # (address and servers are one or the other)
        up["servers"] = [dict(BASE_UPSTREAM, **{rest[len("servers[]."):]: value})]
    elif "." in rest:
        section, field = rest.split(".", 1)
        up[section] = {field: value}
    else:
        up[rest] = value
        if rest == "hash_key":
            up["balance"] = "hash"  # (read with balance: hash only)
    return up


# The certificate and key a `tls:` section of the check's files names (made by
# check_defaults with the openssl command: --check reads them).
TLS_FILES = {}


def tls_for(rest, value):
    """A tls section that sets one of its keys; the certificate files are real ones."""
    tls = {"listen": '"127.0.0.1:8443"',
           "certificates": [{"cert": f'"{TLS_FILES["cert"]}"', "key": f'"{TLS_FILES["key"]}"'}]}
    if rest in ("client_ca", "client_certificates"):
        tls["client_ca"] = f'"{TLS_FILES["cert"]}"'  # (a CA that exists; client_certificates needs one)
    if not rest.startswith("certificates[].") and rest != "client_ca":
        tls[rest] = value
    return tls


def config_for(keys):
    """A file that sets each of `keys` ({path: YAML text}): the top-level sections' keys
    together, each upstream key on an upstream of its own, each route key on a route of
    its own (so that path and path_prefix, rate and limit never meet)."""
    cfg = {"upstreams": {"api": dict(BASE_UPSTREAM)}, "routes": [dict(BASE_ROUTE, name="all")]}
    for i, (key, value) in enumerate(keys.items()):
        if key.startswith("upstreams.<name>."):
            cfg["upstreams"][f"u{i}"] = upstream_for(key[len("upstreams.<name>."):], value)
        elif key.startswith("routes[]."):
            route = dict(BASE_ROUTE, name=f"r{i}", match=dict(BASE_ROUTE["match"]))
            rest = key[len("routes[]."):]
            if rest.startswith("match."):
                field = rest[len("match."):]
                if field == "path":
                    del route["match"]["path_prefix"]
                route["match"][field] = value
            elif rest.startswith("response."):
                route["response"] = {rest[len("response."):]: value}
            elif rest.startswith("limits[].plans."):
                field = rest[len("limits[].plans."):]
                limit = dict(RATE_LIMIT if field.split(".")[-1] in RATE_KEYS else WINDOW_LIMIT, key="header:X-Api-Key")
                plans = {"from": "header:X-Plan"} if field not in ("from", "consumers", "consumer_key") else {}
                if field in ("consumers", "consumer_key"):
                    plans["consumers"] = f'"{TLS_FILES["consumers"]}"'  # (a file that exists)
                    if field == "consumer_key":
                        plans[field] = value
                elif field.startswith("<plan>."):
                    plans["gold"] = {field[len("<plan>."):]: value}
                elif field == "<plan>":
                    plans["gold"] = value
                else:
                    plans[field] = value
                limit["plans"] = plans
                route["limits"] = [limit]
            elif rest.startswith("limits[]."):
                field = rest[len("limits[]."):]
                limit = dict(RATE_LIMIT if field in RATE_KEYS else WINDOW_LIMIT)
                if field == "timezone":  # (read with align: calendar, a day long)
                    limit.update(align="calendar", window="1d")
                if field == "max_delay":  # (gcra's, with on_exceed: delay)
                    limit = dict(RATE_LIMIT, on_exceed="delay")
                limit[field] = value
                route["limits"] = [limit]
            else:
                route[rest] = value
            cfg["routes"].append(route)
        elif key.startswith("tls."):
            for k, v in tls_for(key[len("tls."):], value).items():
                cfg.setdefault("tls", {}).setdefault(k, v)
                if k == key[len("tls."):]:
                    cfg["tls"][k] = v
        else:
            *sections, field = key.split(".")
            at = cfg
            for s in sections:
                at = at.setdefault(s, {})
            at[field] = value
    # (tracing.export's keys are read with an endpoint, and need tracing.propagate on)
    if "export" in cfg.get("tracing", {}):
        cfg["tracing"]["propagate"] = "true"
        cfg["tracing"]["export"].setdefault("endpoint", "http://127.0.0.1:4318/v1/traces")
    # Sections first, as a reader writes them; upstreams before the routes that use them.
    order = [k for k in cfg if k not in ("upstreams", "routes")] + ["upstreams", "routes"]
    return emit({k: cfg[k] for k in order}) + "\n"


def refused(binary, text, tmp):
    path = Path(tmp) / "floodgate.yaml"
    path.write_text(text)
    p = subprocess.run([binary, "--check", "--config", str(path)], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"})
    return None if p.returncode == 0 else (p.stdout + p.stderr).strip()


def check_defaults(binary, rows, problems, report):
    groups = {"top level and sections": {}, "upstreams": {}, "routes": {}}
    for key, (_, value, why) in rows.items():
        if value is None:
            report.append(f"  not run: `{key}`: {why}")
            continue
        group = "upstreams" if key.startswith("upstreams.") else "routes" if key.startswith("routes[].") else \
            "top level and sections"
        groups[group][key] = value
    with tempfile.TemporaryDirectory() as tmp:
        TLS_FILES.update(cert=f"{tmp}/tls.pem", key=f"{tmp}/tls.key", consumers=f"{tmp}/consumers.txt")
        Path(TLS_FILES["consumers"]).write_text("# no consumers\n")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", TLS_FILES["key"], "-out", TLS_FILES["cert"], "-days", "1", "-subj", "/CN=check"],
                       check=True, capture_output=True)
        for name, keys in groups.items():
            error = refused(binary, config_for(keys), tmp)
            report.append(f"  floodgate --check, {name}: {len(keys)} keys at their defaults: "
                          f"{'refused' if error else 'OK'}")
            if not error:
                continue
            blamed = False
            for key, value in keys.items():
                if e := refused(binary, config_for({key: value}), tmp):
                    blamed = True
                    problems.append(f"docs/configuration.md:{rows[key][0]}: `{key}: {value}` (its documented "
                                    f"default) is refused by floodgate --check:\n      " + e.replace("\n", "\n      "))
            if not blamed:
                problems.append(f"the {name} keys at their defaults are refused together, each accepted alone:\n"
                                f"      " + error.replace("\n", "\n      "))


def check_layers(src, problems, report):
    allowed = {}
    for line in (src / "src" / "layers.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if ":" in line and not line.startswith("known"):
            folder, deps = line.split(":", 1)
            allowed[folder.strip()] = set(deps.split())
    doc = src / "docs" / "architecture.md"
    seen = {}
    for _, header, body in tables(doc):
        if "folder" not in header or not any(h.startswith("may include") for h in header):
            continue
        fcol = header.index("folder")
        icol = next(i for i, h in enumerate(header) if h.startswith("may include"))
        for n, cells in body:
            folder = cells[fcol].strip("`/")
            seen[folder] = (n, set(re.findall(r"[a-z_]+", cells[icol])) - {"nothing"})
    for folder in sorted(set(allowed) | set(seen)):
        if folder not in seen:
            problems.append(f"docs/architecture.md: no row for `{folder}/` in the layer table (src/layers.txt has it)")
        elif folder not in allowed:
            problems.append(f"docs/architecture.md:{seen[folder][0]}: `{folder}/` is not in src/layers.txt")
        elif seen[folder][1] != allowed[folder]:
            n, listed = seen[folder]
            problems.append(f"docs/architecture.md:{n}: `{folder}/` may include {' '.join(sorted(allowed[folder]))} "
                            f"(src/layers.txt), the table says {' '.join(sorted(listed)) or 'nothing'}")
    report.append(f"  the layer table: {len(seen)} folders against src/layers.txt")


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(path):
    seen, out, fence = {}, set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"#{1,6} (.*)", line)):
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def check_links(src, problems, report):
    files = [src / "README.md", *sorted((src / "docs").glob("*.md")), src / "tests" / "fuzz" / "README.md"]
    count = 0
    for path in files:
        fence = False
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fence = not fence
            if fence:
                continue
            for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
                if re.match(r"[a-z]+:", target):
                    continue  # https:, mailto:
                count += 1
                where = f"{path.relative_to(src)}:{n}"
                file, _, anchor = target.partition("#")
                dest = (path.parent / file).resolve() if file else path
                if not dest.exists():
                    problems.append(f"{where}: link to {target}: {file} does not exist")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{where}: link to {target}: {dest.relative_to(src.resolve())} has no heading "
                                    f"#{anchor}")
    report.append(f"  links: {count} relative links in {len(files)} files")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    src, binary = Path(sys.argv[1]).resolve(), sys.argv[2]
    problems, report = [], []
    keys = loader_keys(src, problems)
    rows = documented_keys(src / "docs" / "configuration.md", problems)
    for key, where in sorted(keys.items()):
        if not covers(key, rows):
            problems.append(f"{where}: the loader reads `{key}`, which docs/configuration.md does not document "
                            f"(add a row: | `{key}` | type | default | meaning |)")
    for key, (n, _, _) in sorted(rows.items()):
        # (a plan, whose name is the file's: the loader reads its keys)
        if key not in keys and not (key.endswith(".<plan>") and any(k.startswith(key + ".") for k in keys)):
            problems.append(f"docs/configuration.md:{n}: `{key}` is documented, but the loader reads no such key")
    leaves = [k for k in keys if k in rows]
    report.append(f"  the reference: {len(rows)} rows; the loader reads {len(keys)} keys ({len(leaves)} of them "
                  f"rows, the others sections documented by their keys' rows)")
    check_defaults(binary, rows, problems, report)
    check_layers(src, problems, report)
    check_links(src, problems, report)
    print("\n".join(report))
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for p in problems:
            print("  - " + p)
        sys.exit(1)
    print("OK: the configuration reference matches the loader, the layer table matches src/layers.txt, every link leads to its target")


if __name__ == "__main__":
    main()
