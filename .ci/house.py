#!/usr/bin/env python3
"""The shape of the house, measured: source files over 700 lines, functions over
80 (Rust's, and the Python and shell scripts'), imports that point up lib.rs's list of floors, circles of files no comment
owns, modules missing from the floor list and rooms missing from README's table.

Run from the repository root: `python3 .ci/house.py` prints the figures and exits 1
when a limit is broken; `--report` prints them and always exits 0.
"""
import re
import sys
from pathlib import Path

FILE_LIMIT = 700
FN_LIMIT = 80
# Generated code and test modules are counted but not held to the limits.
EXEMPT = ("engine/src/model/bindings.rs",)

FN = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def sources():
    for root in ("engine/src", "policies", "build-support/src"):
        for path in sorted(Path(root).rglob("*.rs")):
            if "target" in path.parts:
                continue
            yield path


def scripts():
    """The Python and shell scripts the repository keeps (built trees aside)."""
    for pattern in ("*.py", "*.sh"):
        for path in sorted(Path(".").rglob(pattern)):
            if not {"target", "node_modules", ".git"} & set(path.parts):
                yield path


def script_functions(path, lines):
    """(name, first line, length) of each Python `def` (to the next line as
    indented or less) and each shell `name() {` (to its closing `}`)."""
    python = path.suffix == ".py"
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)def (\w+)", line) if python else re.match(r"^(\s*)(\w[\w-]*)\(\)\s*\{", line)
        if not m:
            continue
        indent, end = len(m.group(1)), len(lines)
        if not python and line.rstrip().endswith("}"):
            yield m.group(2), i + 1, 1
            continue
        for k in range(i + 1, len(lines)):
            text = lines[k]
            if python:
                if text.strip() and len(text) - len(text.lstrip()) <= indent:
                    end = k
                    break
            elif text.startswith(m.group(1) + "}"):
                end = k + 1
                break
        yield m.group(2), i + 1, end - i


def is_test(path):
    return path.name == "tests.rs" or "tests" in path.parts[:-1] and path.parts[0] != "tests"


def functions(lines):
    """(name, first line, length) of every function with a body, by indentation."""
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        indent = m.group(1)
        # A declaration without a body ends in `;` before any `{`.
        j = i
        while j < len(lines) and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
            j += 1
        if j >= len(lines) or "{" not in lines[j]:
            continue
        if lines[j].rstrip().endswith("}") and j == i:
            yield m.group(7), i + 1, 1
            continue
        for k in range(j, len(lines)):
            if lines[k].startswith(indent + "}") and not lines[k].startswith(indent + "} else"):
                yield m.group(7), i + 1, k - i + 1
                break


def test_module_start(lines):
    """Where an inline `mod tests { … }` block starts; a `mod tests;`
    declaration (its tests in their own file) ends nothing."""
    for i, line in enumerate(lines):
        if (
            line.startswith("#[cfg(test)]")
            and i + 1 < len(lines)
            and re.match(r"(pub(\(crate\))? )?mod \w+ \{", lines[i + 1])
        ):
            return i
    return len(lines)


def code_lines(path):
    """The lines of `path` before its test module, comments aside."""
    lines = path.read_text().splitlines()
    lines = lines[: test_module_start(lines)]
    return [l for l in lines if not l.strip().startswith("//")]


def floors(lib):
    """Each module's floor, from lib.rs's list (one floor a line, bottom first)."""
    rank = {}
    for n, line in enumerate(re.findall(r"^//! - (.*)$", lib, re.MULTILINE)):
        for module in re.findall(r"\[`(\w+)`\]", line.split(":")[0]):
            rank[module] = n
    return rank


def room_files():
    for path in sorted(Path("engine/src").rglob("*.rs")):
        parts = path.relative_to("engine/src").with_suffix("").parts
        if parts[-1] == "mod":
            parts = parts[:-1]
        if not parts or parts[0] in ("lib", "main") or is_test(path):
            continue
        yield "::".join(parts), path


def upward_imports(rank):
    for module, path in room_files():
        room = module.split("::")[0]
        for n, line in enumerate(code_lines(path)):
            for used in re.findall(r"crate::(\w+)", line):
                if used != room and used in rank and rank[used] > rank.get(room, -1):
                    yield f"{path}: imports `{used}`, a floor above `{room}`"


def circles():
    """Circles of files (strongly connected, more than one file) in which no
    file says why with a `// A deliberate cycle with` comment."""
    files = dict(room_files())
    graph = {m: set() for m in files}
    for module, path in files.items():
        parent = module.rsplit("::", 1)[0] if "::" in module else ""
        base = module if path.name == "mod.rs" else parent
        text = "\n".join(code_lines(path))
        for used in re.findall(r"crate::((?:\w+::)*\w+)", text):
            parts = used.split("::")
            for k in range(len(parts), 0, -1):
                if "::".join(parts[:k]) in files:
                    graph[module].add("::".join(parts[:k]))
                    break
        for used in re.findall(r"(?<![\w:])super::((?:\w+::)*\w+)", text):
            parts = used.split("::")
            up = base.rsplit("::", 1)[0] if path.name == "mod.rs" else parent
            for k in range(len(parts), 0, -1):
                name = "::".join([up] + parts[:k]) if up else "::".join(parts[:k])
                if name in files:
                    graph[module].add(name)
                    break
        graph[module].discard(module)
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    for component in found:
        said = any(
            "// A deliberate cycle with" in files[m].read_text() for m in component
        )
        yield component, said


def main():
    report_only = "--report" in sys.argv
    long_files, long_fns = [], []
    total_files = total_lines = 0
    for path in sources():
        lines = path.read_text().splitlines()
        total_files += 1
        total_lines += len(lines)
        if str(path) in EXEMPT or is_test(path):
            continue
        if len(lines) > FILE_LIMIT:
            long_files.append((len(lines), str(path)))
        body = lines[: test_module_start(lines)]
        for name, start, length in functions(body):
            if length > FN_LIMIT:
                long_fns.append((length, f"{path}:{start} {name}"))
    for path in scripts():
        lines = path.read_text().splitlines()
        total_files += 1
        total_lines += len(lines)
        if len(lines) > FILE_LIMIT:
            long_files.append((len(lines), str(path)))
        for name, start, length in script_functions(path, lines):
            if length > FN_LIMIT:
                long_fns.append((length, f"{path}:{start} {name}"))
    problems = []
    lib = Path("engine/src/lib.rs").read_text()
    problems.extend(upward_imports(floors(lib)))
    owned = 0
    for component, said in circles():
        if said:
            owned += 1
        else:
            problems.append(f"a circle of files no comment owns: {', '.join(component)}")
    declared = set(re.findall(r"^(?:pub )?mod (\w+);", lib, re.MULTILINE))
    listed = set(floors(lib))
    for module in sorted(declared - listed):
        problems.append(f"lib.rs declares `{module}` but its floor list does not name it")
    readme = Path("README.md").read_text()
    for room in sorted(p for p in Path("engine/src").iterdir() if p.is_dir()):
        if f"`{room}/`" not in readme:
            problems.append(f"README's table of rooms has no row for `{room}/`")
    print(f"{total_files} source files, {total_lines} lines")
    print(f"files over {FILE_LIMIT} lines (tests and generated code aside): {len(long_files)}")
    for n, p in sorted(long_files, reverse=True):
        print(f"  {n:5} {p}")
    print(f"functions over {FN_LIMIT} lines: {len(long_fns)}")
    for n, p in sorted(long_fns, reverse=True):
        print(f"  {n:5} {p}")
    print(f"circles of files, each owned by a comment: {owned}")
    for p in problems:
        print(p)
    broken = long_files or long_fns or problems
    sys.exit(0 if report_only or not broken else 1)


main()
