"""The mutants of tool_dispatcher.py (or of a layer's module) that mutmut left alive, each with its diff.

    python -B mutation/survivors.py verify_audit_log _audit_entry        # the last run's results
    python -B mutation/survivors.py --run approval_ref 'MemoryOperations.*'  # run mutmut first
    python -B mutation/survivors.py --run --section 20                     # every function of section 20
    python -B mutation/survivors.py --counts                               # every function run, counts
    python -B mutation/survivors.py --layer durable --run 'Ledger.*'       # durable/durable_dispatcher.py
    python -B mutation/survivors.py --layer import --run draft _compile    # mcp_bridge/importer.py

A FUNCTION is a module-level function's name or Class.method, with fnmatch wildcards; --section N
names every function and method defined under the module's banner "N. ...". --run calls
mutmut (from the virtual environment README.md sets up: --mutmut, or $MUTMUT) over those functions
only, two workers unless --jobs says otherwise, and without writing bytecode; mutmut keeps its
results in mutants/ at the checkout's root (git-ignored), and this script reads them there.

--layer durable or --layer import names a layer's module instead (durable/durable_dispatcher.py
with durable/test_durable_dispatcher.py; mcp_bridge/importer.py with mcp_bridge/test_importer.py).
Its tests import it as a top-level module (from their own folder), and mutmut names a mutant after
the path it mutates, so a layer runs in a folder of its own outside the checkout (--workdir,
default /tmp/td-mutmut-LAYER): the layer's folder linked file by file as src/ (mutmut strips
"src." from its module names), the checkout's other top-level entries linked beside it, and a
pyproject.toml holding that layer's [tool.mutmut], written afresh before every run. Its results
stay in that folder's mutants/; its equivalent mutants are listed in mutation/EQUIVALENT-LAYER.md.

A survivor is a mutant no test failed on; "no tests" (no test reaches the function) is reported
with them. A survivor whose changed lines mutation/EQUIVALENT.md lists for its function is counted
as equivalent instead, and not listed. Exit status 1 when a survivor is left that the file does not
list, 2 when there are no results to read. Standard library only.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MUTMUT = "/tmp/td-mutmut-venv/bin/mutmut"
SEPARATOR = "\u01c1"  # mutmut's name for Class.method is x<SEP>Class<SEP>method

# mutmut's own reading of a worker's exit status (mutmut/stats.py), folded into five outcomes.
OUTCOMES = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
            36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}
COLUMNS = ("killed", "timeout", "survived", "equivalent", "no tests", "not checked", "other")

# A layer: its folder, its module and the test file that checks it. Left out of its runs, the classes
# that start interpreters: durable's TestCli runs durable_dispatcher.py as a script, whose functions
# are __main__'s and never mutmut's "durable_dispatcher.*" (its children run the original code
# whatever the mutant); TestCrashRecovery starts six children in setUpClass and TestBenchmark
# times runs; the import's TestCommandLine starts the bridge's script for each test. Each child
# compiles mutmut's rewrite of the module afresh (4 MB for durable, 2 MB for the import), minutes
# per mutant in all; every function checked is reached by the in-process tests of its sections.
LAYERS = {
    "durable": {"folder": "durable", "module": "durable_dispatcher", "tests": "test_durable_dispatcher.py",
                "deselect": ("TestCli", "TestBenchmark", "TestCrashRecovery")},
    "import": {"folder": "mcp_bridge", "module": "importer", "tests": "test_importer.py",
               "deselect": ("TestCommandLine",)},
}


class Target:
    """Where mutmut runs for one module, where it writes that module's mutants, and where its
    equivalent mutants are listed."""

    def __init__(self, layer: str | None = None, workdir: str | None = None) -> None:
        self.layer = layer
        if layer is None:
            self.module, self.workdir = "tool_dispatcher", ROOT
            self.source = os.path.join(ROOT, "tool_dispatcher.py")
            self.mutated = os.path.join(ROOT, "mutants", "tool_dispatcher.py")
            self.equivalent = os.path.join(ROOT, "mutation", "EQUIVALENT.md")
            return
        spec = LAYERS[layer]
        self.module = spec["module"]
        self.workdir = workdir or os.path.join(tempfile.gettempdir(), "td-mutmut-" + layer)
        self.source = os.path.join(ROOT, spec["folder"], self.module + ".py")
        self.mutated = os.path.join(self.workdir, "mutants", "src", self.module + ".py")
        self.equivalent = os.path.join(ROOT, "mutation", "EQUIVALENT-%s.md" % layer)

    def prepare(self) -> None:
        """A layer's folder: links to the checkout and its own [tool.mutmut] (nothing for the core)."""
        if self.layer is None:
            return
        spec = LAYERS[self.layer]
        folder, module, tests = spec["folder"], spec["module"], spec["tests"]
        os.makedirs(os.path.join(self.workdir, "src"), exist_ok=True)
        links = {}
        for name in os.listdir(os.path.join(ROOT, folder)):
            if name != "__pycache__":
                links[os.path.join("src", name)] = os.path.join(ROOT, folder, name)
        for name in os.listdir(ROOT):
            if not name.startswith(".") and name not in (folder, "mutants", "pyproject.toml"):
                links[name] = os.path.join(ROOT, name)
        for name, target in links.items():
            path = os.path.join(self.workdir, name)
            if os.path.islink(path) and os.readlink(path) == target:
                continue
            if os.path.lexists(path):
                os.remove(path)
            os.symlink(target, path)
        source = "src/%s.py" % module
        also_copy = sorted(name for name in links if name != os.path.join("src", module + ".py"))
        deselect = []
        for test in spec["deselect"]:
            deselect += ["--deselect", "src/%s::%s" % (tests, test)]
        lines = ["# Written by mutation/survivors.py --layer %s before every run: edit LAYERS there." % self.layer,
                 "[tool.mutmut]",
                 "source_paths = %s" % json.dumps([source]),
                 "also_copy = %s" % json.dumps(also_copy),
                 "pytest_add_cli_args_test_selection = %s" % json.dumps(["src/" + tests]),
                 'process_isolation = "forkserver"',
                 "pytest_add_cli_args = %s" % json.dumps(["-p", "no:cacheprovider", *deselect]),
                 ""]
        with open(os.path.join(self.workdir, "pyproject.toml"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines))


TARGET = Target()


def key_of(function: str) -> str:
    """verify_audit_log -> x_verify_audit_log; MemoryOperations.claim -> x<SEP>MemoryOperations<SEP>claim."""
    if "." in function:
        cls, method = function.split(".", 1)
        return "x" + SEPARATOR + cls + SEPARATOR + method
    return "x_" + function


def function_of(key: str) -> str:
    if key.startswith("x" + SEPARATOR):
        _, cls, method = key.split(SEPARATOR)
        return cls + "." + method
    return key[2:]


def mutmut_globs(functions: list[str]) -> list[str]:
    return [TARGET.module + "." + key_of(function) + "__mutmut_*" for function in functions]


def run_mutmut(mutmut: str, functions: list[str], jobs: int) -> int:
    TARGET.prepare()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    command = [mutmut, "run", "--max-children", str(jobs), *mutmut_globs(functions)]
    print("$ (cd %s && %s)" % (TARGET.workdir, " ".join(command)), flush=True)
    return subprocess.run(command, cwd=TARGET.workdir, env=env).returncode


def load_results() -> tuple[dict[str, int | None], dict[str, tuple[int, int]]]:
    with open(TARGET.mutated + ".meta", encoding="utf-8") as handle:
        exit_codes = json.load(handle)["exit_code_by_key"]
    with open(TARGET.mutated + ".spans", encoding="utf-8") as handle:
        spans = {name: (start, end) for name, (start, end) in json.load(handle)["spans"].items()}
    return exit_codes, spans


def section_functions(numbers: list[int]) -> list[str]:
    """Every function and Class.method defined under the banners of these sections, in order."""
    with open(TARGET.source, encoding="utf-8") as handle:
        source = handle.read()
    banners = [(source.count("\n", 0, match.start()) + 2, int(match.group(1)))
               for match in re.finditer(r"^# =+\n# (\d+)\. .+\n# =+$", source, re.MULTILINE)]
    wanted = [(start, next((line for line, _ in banners if line > start), 10**9))
              for start, number in banners if number in numbers]
    return [function for function, line in definition_lines().items()
            if any(start < line < end for start, end in wanted)]


def definition_lines() -> dict[str, int]:
    """Function or Class.method -> the line of its def in the checkout's (unmutated) module."""
    with open(TARGET.source, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    lines = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines[node.name] = node.lineno
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines[node.name + "." + item.name] = item.lineno
    return lines


def read_spans(wanted: dict[str, tuple[int, int]]) -> dict[str, list[str]]:
    """The lines of each named span of mutmut's rewritten module, read in one pass."""
    by_start = sorted((start, end, name) for name, (start, end) in wanted.items())
    found: dict[str, list[str]] = {name: [] for name in wanted}
    index = 0
    with open(TARGET.mutated, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            while index < len(by_start) and by_start[index][1] < number:
                index += 1
            if index == len(by_start):
                break
            for start, end, name in by_start[index:]:
                if start > number:
                    break
                if number <= end:
                    found[name].append(line)
    return found


def as_original(lines: list[str], key: str, name: str) -> tuple[list[str], int]:
    """A copy mutmut made of a function, with the function's own name back in its def line, from
    its first decorator or def on; and where the def line is in what is returned."""
    while lines and not lines[0].strip():
        lines = lines[1:]
    at = next(index for index, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ")))
    head = re.sub(re.escape(key) + r"__mutmut_\w+", name, lines[at], count=1)
    return lines[:at] + [head] + lines[at + 1:], at


def diff(original: list[str], mutant: list[str], first_line: int) -> list[str]:
    """A unified diff whose line numbers are those of the checkout's module."""
    out = []
    name = os.path.relpath(TARGET.source, ROOT)
    for line in difflib.unified_diff(original, mutant, name, name + " (mutant)", n=1):
        hunk = re.match(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@", line)
        if hunk:
            old, new = int(hunk.group(1)) + first_line - 1, int(hunk.group(3)) + first_line - 1
            line = "@@ -%d%s +%d%s @@\n" % (old, hunk.group(2) or "", new, hunk.group(4) or "")
        out.append(line if line.endswith("\n") else line + "\n")
    return out


def changed_lines(patch: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    removed = tuple(line[1:].strip() for line in patch if line.startswith("-") and not line.startswith("---"))
    added = tuple(line[1:].strip() for line in patch if line.startswith("+") and not line.startswith("+++"))
    return removed, added


Listed = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def is_listed(patch: list[str], listed: Sequence[Listed]) -> bool:
    shown = {line[1:].strip() for line in patch if line.startswith(" ")}
    return any(changed_lines(patch) == (removed, added) and shown.issuperset(context)
               for removed, added, context in listed)


def load_equivalents(path: str | None = None) -> dict[str, list[Listed]]:
    """EQUIVALENT.md (a layer's: EQUIVALENT-LAYER.md): under a '### FUNCTION' heading, each ```diff
    block is one equivalent mutant, named by the lines it removes (-) and adds (+), compared
    without their indentation; a line starting with a space is context the mutant's diff must
    also show (where one function has two alike changes, it tells them apart)."""
    listed: dict[str, list[Listed]] = {}
    path = path or TARGET.equivalent
    if not os.path.exists(path):
        return listed
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    function = None
    for match in re.finditer(r"^### `?([\w.]+)`?[ \t]*$|^```diff\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        if match.group(1):
            function = match.group(1)
        elif function is not None:
            lines = match.group(2).splitlines()
            removed = tuple(line[1:].strip() for line in lines if line.startswith("-"))
            added = tuple(line[1:].strip() for line in lines if line.startswith("+"))
            context = tuple(line[1:].strip() for line in lines if line.startswith(" "))
            listed.setdefault(function, []).append((removed, added, context))
    return listed


def report(functions: list[str], *, show_diffs: bool) -> int:
    try:
        exit_codes, spans = load_results()
    except FileNotFoundError:
        print("no mutmut results in %s: run this with --run first (docs/mutation-testing.md)"
              % os.path.dirname(TARGET.mutated))
        return 2
    by_function: dict[str, list[tuple[int, str, int | None]]] = {}
    for name, code in exit_codes.items():
        key, _, number = name[len(TARGET.module) + 1:].rpartition("__mutmut_")
        function = function_of(key)
        if functions and not any(fnmatch.fnmatchcase(function, pattern) for pattern in functions):
            continue
        if not functions and code is None:
            continue  # with no FUNCTION named: only the functions some run has checked
        by_function.setdefault(function, []).append((int(number), name, code))
    if not by_function:
        print("no mutants match %s" % " ".join(functions))
        return 2
    equivalents = load_equivalents()
    lines = definition_lines()
    wanted = {}
    for function, mutants in by_function.items():
        key = key_of(function)
        wanted[key + "__mutmut_orig"] = spans[key + "__mutmut_orig"]
        for number, name, code in mutants:
            if OUTCOMES.get(code, "other") in ("survived", "no tests"):
                wanted[key + "__mutmut_%d" % number] = spans[key + "__mutmut_%d" % number]
    sources = read_spans(wanted)
    totals = dict.fromkeys(COLUMNS, 0)
    rows = []
    unlisted = 0
    for function in sorted(by_function, key=lambda f: lines.get(f, 0)):
        key = key_of(function)
        name = function.rpartition(".")[2]
        original, at = as_original(sources[key + "__mutmut_orig"], key, name)
        counts = dict.fromkeys(COLUMNS, 0)
        for number, mutant_name, code in sorted(by_function[function]):
            outcome = OUTCOMES.get(code, "other")
            if outcome in ("survived", "no tests"):
                mutant, _ = as_original(sources[key + "__mutmut_%d" % number], key, name)
                patch = diff(original, mutant, lines.get(function, 1 + at) - at)
                if is_listed(patch, equivalents.get(function, ())):
                    outcome = "equivalent"
                else:
                    unlisted += 1
                    if show_diffs:
                        print("%s  %s (%s)" % (outcome.upper(), mutant_name, function))
                        sys.stdout.writelines("    " + line for line in patch)
                        print()
            counts[outcome] += 1
        rows.append((function, counts))
        for column in COLUMNS:
            totals[column] += counts[column]
    width = max(len(function) for function, _ in rows + [("total", None)])
    shown = [column for column in COLUMNS if totals[column] or column in ("killed", "survived")]
    print("%-*s %6s  %s" % (width, "function", "of", "  ".join("%9s" % column for column in shown)))
    for function, counts in rows + [("total", totals)]:
        print("%-*s %6d  %s" % (width, function, sum(counts.values()),
                               "  ".join("%9d" % counts[column] for column in shown)))
    checked = totals["killed"] + totals["timeout"] + totals["survived"] + totals["equivalent"] + totals["no tests"]
    if checked:
        print("killed or timed out: %d of %d checked (%.1f%%), %d equivalent, %d left"
              % (totals["killed"] + totals["timeout"], checked,
                 100.0 * (totals["killed"] + totals["timeout"]) / checked, totals["equivalent"], unlisted))
    return 1 if unlisted else 0


def main(argv: list[str] | None = None) -> int:
    global TARGET
    parser = argparse.ArgumentParser(description="List the mutants of tool_dispatcher.py (or of a layer's module) "
                                                 "that mutmut left alive.")
    parser.add_argument("functions", nargs="*", metavar="FUNCTION",
                        help="a function or Class.method, fnmatch wildcards allowed; none: every function run")
    parser.add_argument("--section", type=int, action="append", default=[], metavar="N",
                        help="every function of the module's section N (repeatable)")
    parser.add_argument("--run", action="store_true", help="run mutmut over the FUNCTIONs first")
    parser.add_argument("--jobs", type=int, default=2, help="mutmut's workers (default 2)")
    parser.add_argument("--mutmut", default=os.environ.get("MUTMUT", DEFAULT_MUTMUT),
                        help="the mutmut executable (default $MUTMUT, else %s)" % DEFAULT_MUTMUT)
    parser.add_argument("--counts", action="store_true", help="the counts only, no diffs")
    parser.add_argument("--layer", choices=sorted(LAYERS),
                        help="a layer's module instead of tool_dispatcher.py (durable, import)")
    parser.add_argument("--workdir", help="where a layer's mutmut runs (default /tmp/td-mutmut-LAYER)")
    args = parser.parse_args(argv)
    if args.workdir and not args.layer:
        parser.error("--workdir needs --layer")
    TARGET = Target(args.layer, args.workdir and os.path.abspath(args.workdir))
    if args.section:
        found = section_functions(args.section)
        if not found:
            parser.error("no function under section %s" % ", ".join(map(str, args.section)))
        args.functions += found
    if args.run:
        if not args.functions:
            parser.error("--run needs at least one FUNCTION (a whole-module run takes hours)")
        status = run_mutmut(args.mutmut, args.functions, args.jobs)
        if status != 0:
            print("mutmut exited with status %d" % status)
            return status
    return report(args.functions, show_diffs=not args.counts)


if __name__ == "__main__":
    sys.exit(main())
