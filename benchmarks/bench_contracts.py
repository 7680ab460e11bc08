"""The contract loader against json.loads of the same bytes, on a worst-case contracts file.

The file is about 1 MB and inside every limit: the most tools a file may declare, each with an
input and an output schema of 14 string properties, every property's pattern one of the costliest
shapes the contract language accepts, at the longest pattern it accepts, and every pattern text a
new one (a text met again is proved once, so repeats would flatter the loader).

Each round builds a new file (new pattern texts again, so nothing proved in an earlier round is
remembered), then times, one after the other: json.loads of its bytes, parse_contracts of the same
bytes, and the first check of one tool's patterns (where Python's regex of each is built: loading
proves a pattern, the first value to meet it builds the regex). A ratio is the median of the
per-round ratios; nothing here asserts a timing.

    python -B benchmarks/bench_contracts.py            # readable lines (about 5 s)
    python -B benchmarks/bench_contracts.py --json     # one JSON object, for machines
    python -B benchmarks/bench_contracts.py --quick    # one round: proves it runs (CI)

Standard library only.
"""
from __future__ import annotations

if __name__ == "__main__":
    # Ctrl-C while the imports below still run (a good part of a second on a cold machine): the
    # CLI's own answer, CLI_INTERRUPTED and exit 130, never a traceback. run_cli takes SIGINT back.
    import os as _os
    import signal as _signal
    _INTERRUPTED = (b'{\n  "passed": false,\n  "error": {\n    "code": "CLI_INTERRUPTED",\n    "message": "The command '
                    b'was interrupted before it finished.",\n    "retryable": false\n  }\n}\n')
    _signal.signal(_signal.SIGINT, lambda _number, _frame: (_os.write(1, _INTERRUPTED), _os._exit(130)))

import gc
import itertools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tool_dispatcher as td  # noqa: E402  (the module measured lives one directory up)

# ============================================================================================
# Workload: a contracts file of the costliest accepted patterns
# ============================================================================================

TOOLS: Final = td.MAX_TOOLS
PROPERTIES: Final = 14  # per schema: with TOOLS tools, two schemas each, about 1.1 MB of file
PATTERNS_PER_FILE: Final = TOOLS * 2 * PROPERTIES

# Characters that need no escape, in a class or out of one (nor in JSON); the shapes rotate them
# by the seed and take a bounded count from it, so that each seed gives a new text.
LITERALS: Final = tuple(chr(code) for code in range(0x21, 0x7F) if chr(code) not in "^$\\.*+?()[]{}|-/\"")
ESCAPED: Final = tuple("\\" + char for char in "^$.*+?()[]{}|/-")
SHAPE_SEEDS: Final = len(LITERALS) * td.MAX_QUANTIFIER  # distinct texts of one shape


def _parts(seed: int) -> tuple[list[str], int]:
    shift = seed % len(LITERALS)
    return list(LITERALS[shift:] + LITERALS[:shift]), 1 + seed // len(LITERALS) % td.MAX_QUANTIFIER


def optional_atoms(seed: int) -> str:
    """^a{0,n}b?c?...$: every atom may be skipped, so what may follow one reaches to the end."""
    chars, count = _parts(seed)
    body = f"{chars[0]}{{0,{count}}}"
    for atom in chars[1:] + list(ESCAPED):
        if len(body) + len(atom) + 3 > td.MAX_PATTERN_LENGTH:
            break
        body += atom + "?"
    return f"^{body}$"


def optional_groups(seed: int) -> str:
    """^(?:a{0,n}b)?(?:c?d)?...$: a group per two characters, each one optional."""
    chars, count = _parts(seed)
    groups = [f"(?:{chars[0]}{{0,{count}}}{chars[1]})?"]
    groups += [f"(?:{first}?{second})?" for first, second in zip(chars[2::2], chars[3::2])]
    while len("".join(groups)) + 2 > td.MAX_PATTERN_LENGTH:
        groups.pop()
    return "^" + "".join(groups) + "$"


def wide_class(seed: int) -> str:
    """^[a!-~b!-~...]{1,n}$: one class of ranges as wide as printable ASCII."""
    chars, count = _parts(seed)
    tail = f"]{{1,{count}}}$"
    members = ""
    for index in itertools.count():
        member = "!-~" if index % 2 else chars[index // 2 % len(chars)]
        if len(members) + len(member) + len(tail) + 2 > td.MAX_PATTERN_LENGTH:
            break
        members += member
    return f"^[{members}{tail}"


def alternation(seed: int) -> str:
    """^(?:a?b{0,n}c|...)$: the one alternation site, at up to MAX_BRANCHES branches."""
    chars, count = _parts(seed)
    branches = [f"{chars[index]}?{chars[index + 1]}{{0,{count}}}{chars[index + 2]}"
                for index in range(0, min(3 * td.MAX_BRANCHES, len(chars) - 2), 3)]
    while len("|".join(branches)) + 6 > td.MAX_PATTERN_LENGTH:
        branches.pop()
    return "^(?:" + "|".join(branches) + ")$"


SHAPES: Final = (optional_atoms, optional_groups, wide_class, alternation)


def build_contracts(seed: int, tools: int = TOOLS, properties: int = PROPERTIES) -> bytes:
    """The file of one round: pattern texts from `seed` on, none shared with another round's."""
    def schema(number: int) -> dict[str, Any]:
        fields = {}
        for index in range(properties):
            pattern_seed = seed + number * properties + index
            shape = SHAPES[pattern_seed % len(SHAPES)]
            fields[f"p{index:02d}"] = {"type": "string", "pattern": shape(pattern_seed // len(SHAPES))}
        return {"type": "object", "properties": fields, "required": list(fields), "additionalProperties": False}

    entries = [td.declare_tool(f"tool_{index:03d}", description="A tool.", effect="read", required_role="files.read",
                               input_schema=schema(2 * index), output_schema=schema(2 * index + 1))
               for index in range(tools)]
    return json.dumps({"format": td.CONTRACTS_FORMAT, "tools": entries}, separators=(",", ":")).encode()


def round_seed(number: int) -> int:
    """Round 0 is the warm-up; each round's patterns follow the last one's."""
    return number * PATTERNS_PER_FILE


# The linearity line: each round also loads files of fewer tools (the same shapes and
# properties), with pattern texts of their own, after every round's file's: a smaller file must
# not meet texts a larger one proved (nor the other way round).
SWEEP_TOOLS: Final = (TOOLS // 8, TOOLS // 4)
SWEEP_PATTERNS: Final = sum(SWEEP_TOOLS) * 2 * PROPERTIES  # per round


def sweep_seed(number: int, tools: int) -> int:
    """The first pattern seed of round `number`'s file of `tools` tools (one of SWEEP_TOOLS)."""
    before = sum(SWEEP_TOOLS[:SWEEP_TOOLS.index(tools)]) * 2 * PROPERTIES
    return round_seed(MAX_ROUNDS + 1) + number * SWEEP_PATTERNS + before


# ============================================================================================
# Measuring
# ============================================================================================

JSON_REPEATS: Final = 5  # json.loads of ~1 MB takes milliseconds: a round keeps the median of five
FIRST_CHECK_TOOL: Final = "tool_000"  # its 2 * PROPERTIES patterns are checked once each


def _timed(run: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds, and what run answered; the collector paused, as timeit does."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        answer = run()
        return time.perf_counter() - start, answer
    finally:
        if enabled:
            gc.enable()


def _first_checks(contracts: td.ContractSet) -> None:
    """Every pattern of one tool meets a value for the first time: its Python regex is built."""
    spec = contracts[FIRST_CHECK_TOOL]
    for rule in [*spec.input_fields.values(), *spec.output_fields.values()]:
        rule.regex.fullmatch("")


def measure_round(number: int) -> dict[str, float]:
    data = build_contracts(round_seed(number))
    json_seconds = statistics.median(_timed(lambda: json.loads(data))[0] for _ in range(JSON_REPEATS))
    load_seconds, contracts = _timed(lambda: td.parse_contracts(data))
    if len(contracts) != TOOLS:
        raise SystemExit("bench: the worst-case file did not load whole")
    first_seconds, _ = _timed(lambda: _first_checks(contracts))
    sizes = {}
    for tools in SWEEP_TOOLS:
        smaller = build_contracts(sweep_seed(number, tools), tools=tools)
        seconds, loaded = _timed(lambda smaller=smaller: td.parse_contracts(smaller))
        if len(loaded) != tools:
            raise SystemExit("bench: a smaller file did not load whole")
        sizes[tools] = (len(smaller), seconds)
    sizes[TOOLS] = (len(data), load_seconds)
    return {"bytes": len(data), "json_loads": json_seconds, "parse_contracts": load_seconds,
            "first_checks": first_seconds, "sizes": sizes}


def collect(rounds: int, *, quick: bool) -> list[dict[str, float]]:
    if not quick:
        measure_round(0)  # warm-up, discarded
    return [measure_round(number) for number in range(1, rounds + 1)]


# ============================================================================================
# Reporting
# ============================================================================================


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> list[float] | None:
    return [round(load, 2) for load in os.getloadavg()] if hasattr(os, "getloadavg") else None


def report(rounds: list[dict[str, float]], *, quick: bool, load_before: list[float] | None) -> dict[str, Any]:
    def figure(key: str, per: float = 1.0) -> dict[str, float]:
        values = [entry[key] / per for entry in rounds]
        return {"median_ms": round(statistics.median(values) * 1e3, 3), "min_ms": round(min(values) * 1e3, 3)}

    size = statistics.median(entry["bytes"] for entry in rounds)
    return {
        "benchmark": "contracts_loader",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "quick": quick,
        "rounds": len(rounds),
        "file": {"bytes": int(size), "tools": TOOLS, "patterns": PATTERNS_PER_FILE,
                 "distinct_patterns": PATTERNS_PER_FILE},
        "json_loads": figure("json_loads"),
        "parse_contracts": figure("parse_contracts"),
        "first_check_per_pattern": figure("first_checks", 2 * PROPERTIES),
        "ratio_to_json_loads": round(statistics.median(entry["parse_contracts"] / entry["json_loads"]
                                                       for entry in rounds), 1),
        "us_per_byte": round(statistics.median(entry["parse_contracts"] / entry["bytes"] for entry in rounds) * 1e6, 3),
        # Linear: the cost of a byte does not grow with the file. Per size, us per byte (the
        # median of the rounds); the ratio of the largest file's to the smallest's, per round, then
        # the median, with the lowest and the highest.
        "sizes": [{"tools": tools, "bytes": int(statistics.median(entry["sizes"][tools][0] for entry in rounds)),
                   "us_per_byte": round(statistics.median(entry["sizes"][tools][1] / entry["sizes"][tools][0]
                                                          for entry in rounds) * 1e6, 3)}
                  for tools in (*SWEEP_TOOLS, TOOLS)],
        "linearity": _linearity([per_byte(entry, TOOLS) / per_byte(entry, SWEEP_TOOLS[0]) for entry in rounds]),
        "ratio_method": "median of per-round ratios, both sides timed in the same round on the same bytes",
    }


def per_byte(entry: dict[str, Any], tools: int) -> float:
    size, seconds = entry["sizes"][tools]
    return seconds / size


def _linearity(ratios: list[float]) -> dict[str, Any]:
    return {"of": f"{TOOLS} tools", "to": f"{SWEEP_TOOLS[0]} tools", "ratio": round(statistics.median(ratios), 3),
            "spread": [round(min(ratios), 3), round(max(ratios), 3)]}


def render(result: dict[str, Any]) -> str:
    def times(name: str) -> str:
        return f"median {result[name]['median_ms']:,.2f} ms, min {result[name]['min_ms']:,.2f} ms"

    file, linearity = result["file"], result["linearity"]
    return "\n".join([
        f"contracts loader benchmark: Python {result['python']}, {result['cpu_model']} ({result['cpu_count']} cores), "
        f"{result['rounds']} round(s){' (QUICK: figures mean little)' if result['quick'] else ''}, "
        f"load {result['load_average_before']} -> {result['load_average_after']}",
        f"file: {file['bytes']:,} bytes, {file['tools']} tools, {file['patterns']:,} patterns, all distinct",
        f"  json.loads of the bytes             {times('json_loads')}",
        f"  parse_contracts of the same bytes   {times('parse_contracts')}",
        f"  ratio to json.loads                 {result['ratio_to_json_loads']:,.1f}x "
        f"({result['us_per_byte']:.3f} us per byte)",
        f"  first check of a pattern (its regex is built then, not at load)   {times('first_check_per_pattern')}",
        "linear: the cost of a byte by file size (same shapes, new texts): "
        + ", ".join(f"{size['tools']} tools ({size['bytes']:,} B) {size['us_per_byte']:.3f} us"
                    for size in result["sizes"]),
        f"  a byte of {linearity['of']} against a byte of {linearity['to']}: {linearity['ratio']:.2f}x "
        f"[{linearity['spread'][0]:.2f}, {linearity['spread'][1]:.2f}] (1x: linear)",
    ])


# ============================================================================================
# Command line
# ============================================================================================

# Each round's patterns are new texts: a shape has SHAPE_SEEDS of them, and the rounds after the
# warm-up must not run out.
MAX_ROUNDS: Final = min(50, SHAPE_SEEDS * len(SHAPES) // (PATTERNS_PER_FILE + SWEEP_PATTERNS) - 1)


def _arguments(argv: list[str] | None) -> Any:
    parser = td.CliParser(prog="bench_contracts",
                          description="Time the contract loader against json.loads on a worst-case file.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the lines")
    parser.add_argument("--quick", action="store_true", help="one round, no warm-up: proves it runs, for CI")
    parser.add_argument("--rounds", type=int, default=None, help=f"rounds after the warm-up, 1 to {MAX_ROUNDS} "
                                                                  "(default 7, quick 1)")
    arguments = parser.parse_args(argv)
    if arguments.rounds is not None and not 1 <= arguments.rounds <= MAX_ROUNDS:
        raise td.BoundaryError("CLI_USAGE")
    return arguments


def _run(argv: list[str] | None) -> int:
    arguments = _arguments(argv)
    rounds = arguments.rounds if arguments.rounds is not None else (1 if arguments.quick else 7)
    load_before = load_average()
    result = report(collect(rounds, quick=arguments.quick), quick=arguments.quick, load_before=load_before)
    sys.stdout.write((json.dumps(result, indent=2) if arguments.json else render(result)) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """A bad command line is CLI_USAGE and Ctrl-C is CLI_INTERRUPTED, in the project's failure shape."""
    return td.run_cli(lambda: _run(argv))


if __name__ == "__main__":
    sys.exit(main())
