"""The installed artifact's checks, for release/ci.sh.

    python -B release/smoke.py contents WHEEL            (from the checkout's copy: the wheel's files)
    VENV/bin/python -B smoke.py installed DATA_DIR       (from a folder outside the checkout)

``contents`` compares the wheel's file list with the layers' folders: every module that build_py
installs is there under its package name, with py.typed and the stream fixtures, and no test, no
fault server, no top-level name but ``tool_dispatcher`` and the five ``tool_dispatcher_*`` packages.

``installed`` runs in a fresh virtual environment where only the wheel is installed, from a
folder that is not the checkout: it imports every layer, checks that no module is loaded twice or
under a plain name (``client``, ``durable_dispatcher``, ...), that the core imports only the standard
library, runs each command's ``--help``, its failure shape, and a real job for each (the fixture,
the durable ledger, a recorded stream, a bench scenario and a plans file with a user orchestrator in
its child process, an MCP import of the example server, the hostile-artifact fixture), then
examples/own_tools.py and examples/artifact_tools.py. DATA_DIR holds
copies of tool-cases.json, samples/plans.jsonl, the bench's examples/, own_tools.py and artifact_tools.py.
``installed --extras`` checks instead that the postgres and signatures extras' layers work.
Exit 0 when every check held; each failure is printed, and the exit is 1.
"""
from __future__ import annotations

import fnmatch
import importlib
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

PACKAGES = {  # installed package: its folder in the checkout
    "tool_dispatcher_durable": "durable",
    "tool_dispatcher_streams": "provider_streams",
    "tool_dispatcher_mcp": "mcp_bridge",
    "tool_dispatcher_bench": "tool-transaction-bench/txbench",
    "tool_dispatcher_signatures": "signatures",
    "tool_dispatcher_artifacts": "artifacts",
}
NOT_INSTALLED = ("test_*", "fault_server", "checkpoint_cases")  # release/build_py.py's list
COMMANDS = {  # command on PATH: what `python -m` runs the same
    "tool-dispatcher": "tool_dispatcher",
    "tool-dispatcher-durable": "tool_dispatcher_durable",
    "tool-dispatcher-streams": "tool_dispatcher_streams",
    "tool-dispatcher-bench": "tool_dispatcher_bench",
    "tool-dispatcher-mcp": "tool_dispatcher_mcp",
    "tool-dispatcher-signatures": "tool_dispatcher_signatures",
    "tool-dispatcher-artifacts": "tool_dispatcher_artifacts",
}
PLAIN_NAMES = ("client", "importer", "forward", "guard", "census", "demo_server", "fault_server", "mcp_bridge",
               "durable_dispatcher", "postgres_store", "bench_durable", "durable", "provider_streams",
               "stream_table", "txbench", "transaction_bench", "audit_signatures", "signatures", "cli",
               "artifacts", "multimodal", "hostile", "makers", "files", "urls")
EXTRAS = ("psycopg", "cryptography", "mcp", "openai", "anthropic", "google")
EXPECTED_REQUIRES = {"postgres": ["psycopg[binary]>=3.1"], "mcp": [], "signatures": ["cryptography>=42"],
                     "sdk-checks": ["openai==3.57.0", "anthropic==2.14.0", "google-genai==3.6.1", "mcp==2.3.0"]}

failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"ok    {what.split(' (')[0]}" if condition else f"FAIL  {what}")  # details only for a failure
    if not condition:
        failures.append(what)


def installed_module(name: str) -> bool:
    return not any(fnmatch.fnmatchcase(name, pattern) for pattern in NOT_INSTALLED)


# -- the wheel's files ----------------------------------------------------------------------------

def contents(wheel: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = {name for name in archive.namelist() if ".dist-info/" not in name}
    # The core, one module in the checkout, is the package tool_dispatcher in the wheel (build_py.py).
    expected = {"tool_dispatcher/__init__.py", "tool_dispatcher/__main__.py", "tool_dispatcher/py.typed"}
    for package, folder in PACKAGES.items():
        expected |= {f"{package}/{path.name}" for path in Path(folder).glob("*.py") if installed_module(path.stem)}
        expected.add(f"{package}/py.typed")
    expected |= {f"tool_dispatcher_streams/fixtures/{path.name}" for path in Path("provider_streams/fixtures").glob("*.json")}
    expected.add("tool_dispatcher_artifacts/hostile-artifacts.json")
    check(not expected - names, f"the wheel has every installed file (missing: {sorted(expected - names)})")
    check(not names - expected, f"the wheel has nothing else (extra: {sorted(names - expected)})")
    check(not any(fnmatch.fnmatchcase(Path(name).stem, "test_*") for name in names), "no test module in the wheel")
    check({name.split("/")[0] for name in names} == {"tool_dispatcher", *PACKAGES},
          "top-level names: tool_dispatcher and the tool_dispatcher_* packages only")
    with zipfile.ZipFile(wheel) as archive:
        core = archive.read("tool_dispatcher/__init__.py") if "tool_dispatcher/__init__.py" in names else b""
    check(core == Path("tool_dispatcher.py").read_bytes(), "the installed core is tool_dispatcher.py byte for byte")


# -- the installed packages -----------------------------------------------------------------------

def run(*command: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, input=stdin)


def failure_shape(done: subprocess.CompletedProcess[str], code: str) -> bool:
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return False
    return (done.returncode == 2 and answer.get("passed") is False and answer["error"]["code"] == code
            and done.stderr == "")


def imports() -> None:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    core = importlib.import_module("tool_dispatcher")
    check(Path(core.__file__).resolve() == site / "tool_dispatcher" / "__init__.py", "tool_dispatcher is the installed core")
    modules = []
    for package in PACKAGES:
        modules.append(importlib.import_module(package))
        folder = Path(modules[-1].__file__).resolve().parent
        check(folder == site / package, f"{package} is the installed package")
        for path in sorted(folder.glob("*.py")):
            if path.stem not in ("__init__", "__main__"):
                modules.append(importlib.import_module(f"{package}.{path.stem}"))
    check(len(modules) > 30, f"every layer's module imported ({len(modules)})")
    untyped = [name for name in ("tool_dispatcher", *PACKAGES) if not (site / name / "py.typed").is_file()]
    check(not untyped, f"the core and every layer carry py.typed (not: {untyped})")
    leaked = sorted(name for name in PLAIN_NAMES if name in sys.modules)
    check(not leaked, f"no layer module under a plain top-level name (found: {leaked})")
    files = [Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)]
    ours = [path for path in files if site in path.parents]
    check(len(ours) == len(set(ours)), "no module of the project loaded twice under two names")
    check(not any(str(path).startswith(str(Path.cwd().resolve()) + os.sep) for path in files),
          "nothing imported from the working folder")
    loaded = sorted(name for name in EXTRAS if name in sys.modules)
    check(not loaded, f"importing every layer loads no extra (loaded: {loaded})")
    # The core alone: only the standard library and itself.
    code = ("import sys, sysconfig, tool_dispatcher; std = (sysconfig.get_paths()['stdlib'], "
            "sysconfig.get_paths()['platstdlib']); print(sorted(n for n, m in list(sys.modules.items()) "
            "if getattr(m, '__file__', None) and not m.__file__.startswith(std) and n != 'tool_dispatcher'))")
    done = run(sys.executable, "-B", "-I", "-c", code)
    check(done.returncode == 0 and done.stdout.strip() == "[]",
          f"the core imports the standard library only (others: {done.stdout.strip()} {done.stderr[-300:]})")
    requires = run(sys.executable, "-B", "-c", "import importlib.metadata as m, json; "
                   "print(json.dumps(m.requires('tool-dispatcher')))")
    declared: dict[str, list[str]] = {extra: [] for extra in EXPECTED_REQUIRES}
    for requirement in json.loads(requires.stdout):
        spec, _, marker = requirement.partition(";")
        declared.setdefault(marker.split("==")[-1].strip().strip("'\""), []).append(spec.strip())
    check({k: sorted(v) for k, v in declared.items()} == {k: sorted(v) for k, v in EXPECTED_REQUIRES.items()},
          f"the extras declared are what each layer needs ({declared})")


def commands(data: Path) -> None:
    bindir = Path(sys.executable).parent
    for command, module in COMMANDS.items():
        executable = bindir / command
        done = run(str(executable), "--help")  # named as the user typed it, not by its source file
        check(done.returncode == 0 and f"usage: {command} " in done.stdout, f"{command} --help")
        done = run(sys.executable, "-B", "-m", module, "--help")
        check(done.returncode == 0 and "usage" in done.stdout.lower(), f"python -m {module} --help")
        done = run(str(executable), "--no-such-option")
        check(failure_shape(done, "CLI_USAGE"), f"{command} --no-such-option: CLI_USAGE, exit 2, nothing on stderr")
    for verb in ("import", "guard"):
        done = run(str(bindir / "tool-dispatcher-mcp"), verb, "--help")  # the guard's stdout is the client's
        check(done.returncode == 0 and f"usage: tool-dispatcher-mcp {verb} " in done.stdout + done.stderr,
              f"tool-dispatcher-mcp {verb} --help")
    fixture = str(data / "tool-cases.json")
    for how in ([str(bindir / "tool-dispatcher")], [sys.executable, "-B", "-m", "tool_dispatcher"]):
        done = run(*how, "--fixture", fixture)
        check(done.returncode == 0 and json.loads(done.stdout)["passed"] is True, f"{' '.join(how[-2:])} --fixture")
    durable = str(bindir / "tool-dispatcher-durable")
    for verb in (["run", "--fixture", fixture], ["recover"], ["verify-chain"]):
        done = run(durable, *verb, "--db", "durable-demo.sqlite3")
        check(done.returncode == 0, f"tool-dispatcher-durable {verb[0]} ({done.stdout[-200:]})")
    done = run(str(bindir / "tool-dispatcher-streams"), "--provider", "openai", "--stream", "parallel_calls")
    check(done.returncode == 0, f"tool-dispatcher-streams reads its installed fixtures ({done.stdout[-200:]})")
    done = run(sys.executable, "-B", "-m", "tool_dispatcher_streams.stream_table", "--help")
    check(done.returncode == 0, "python -m tool_dispatcher_streams.stream_table --help")
    done = run(str(bindir / "tool-dispatcher-bench"), "--scenario", "S01")
    check(done.returncode == 0, "tool-dispatcher-bench --scenario S01")
    done = run(str(bindir / "tool-dispatcher-bench"), "score", "--plans", str(data / "plans.jsonl"),
               "--orchestrator", "examples.simple_orchestrator:step")
    check(done.returncode == 0 and '"kind": "overall"' in done.stdout,
          f"tool-dispatcher-bench score with a user orchestrator in its child process ({done.stdout[-200:]})")
    server = f"{sys.executable} -B -m tool_dispatcher_mcp.demo_server"
    done = run(str(bindir / "tool-dispatcher-mcp"), "import", "--server-command", server,
               "--out", "draft.json", "--report", "report.json")
    check(done.returncode == 0 and Path("draft.json").is_file(), f"tool-dispatcher-mcp import of the example server ({done.stdout[-300:]})")
    done = run(str(bindir / "tool-dispatcher-artifacts"), "--fixture", str(data / "hostile-artifacts.json"))
    check(done.returncode == 0 and json.loads(done.stdout)["passed"] is True,
          f"tool-dispatcher-artifacts runs the hostile-artifact fixture ({done.stdout[-200:]})")
    done = run(str(bindir / "tool-dispatcher-signatures"), "keygen", "--out", "keys")
    check(failure_shape(done, "SIGNATURES_UNAVAILABLE"), "tool-dispatcher-signatures without its extra: SIGNATURES_UNAVAILABLE")
    done = run(sys.executable, "-B", str(data / "example" / "own_tools.py"))
    check(done.returncode == 0 and json.loads(done.stdout)["passed"] is True,
          f"examples/own_tools.py against the installed packages ({done.stdout[-200:]} {done.stderr[-300:]})")
    done = run(sys.executable, "-B", str(data / "example" / "artifact_tools.py"))
    check(done.returncode == 0 and json.loads(done.stdout)["passed"] is True,
          f"examples/artifact_tools.py against the installed packages ({done.stdout[-200:]} {done.stderr[-300:]})")
    # The same copies under a Python without the packages (the one this environment was made
    # from, isolated from every path): a sentence and exit 2, no traceback.
    base = Path(sys.base_prefix) / "bin" / "python3"
    if base.is_file() and run(str(base), "-I", "-c", "import tool_dispatcher_mcp").returncode != 0:
        for example in ("own_tools.py", "artifact_tools.py"):
            done = run(str(base), "-I", "-B", str(data / "example" / example))
            check(done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
                  and done.stderr.startswith(f"{example}: tool-dispatcher is not installed for this Python"),
                  f"examples/{example} before the install: its sentence, exit 2 ({done.stderr[-300:]})")


def extras(data: Path) -> None:
    bindir = Path(sys.executable).parent
    from tool_dispatcher_durable import postgres_store

    check(postgres_store.psycopg is not None, "[postgres]: the PostgreSQL store finds psycopg")
    done = run(str(bindir / "tool-dispatcher"), "--fixture", str(data / "tool-cases.json"), "--audit-log", "run.log")
    check(done.returncode == 0, "tool-dispatcher --fixture --audit-log with the extras installed")
    signatures = str(bindir / "tool-dispatcher-signatures")
    steps = [run(signatures, "keygen", "--out", "keys"),
             run(signatures, "sign", "run.log", "--sign-key", "keys/signing-key.pem", "--every", "8"),
             run(signatures, "--verify-audit", "run.log", "--public-key", "keys/public-key.pem")]
    check(all(step.returncode == 0 for step in steps),
          f"[signatures]: keygen, sign and verify the run's audit log ({[s.stdout[-120:] for s in steps]})")
    loaded = sorted(name for name in EXTRAS if name in sys.modules)
    check(loaded == ["psycopg"], f"the durable layer loaded psycopg, nothing else of the extras ({loaded})")


def main(argv: list[str]) -> int:
    if argv[:1] == ["contents"] and len(argv) == 2:
        contents(argv[1])
    elif argv[:1] == ["installed"] and len(argv) == 2:
        imports()
        commands(Path(argv[1]))
    elif argv[:1] == ["installed"] and argv[2:] == ["--extras"]:
        extras(Path(argv[1]))
    else:
        print(__doc__)
        return 2
    print(f"{len(failures)} failed" if failures else "smoke: all checks held")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
