"""The contracts benchmark: its workload is inside every limit and new in every round, its report
is a ratio of same-round figures, and its command line answers in the project's failure shape.

Nothing here times anything: the report is fed made-up rounds, and the command line runs with
the measuring replaced.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import unittest
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_contracts as bench  # noqa: E402

td = bench.td

USAGE = {"passed": False, "error": {"code": "CLI_USAGE", "message": "The command line is not valid; see --help.",
                                    "retryable": False}}


def patterns_of(data: bytes) -> list[str]:
    return [field["pattern"] for tool in json.loads(data)["tools"] for side in ("input_schema", "output_schema")
            for field in tool[side]["properties"].values()]


class TestWorkload(unittest.TestCase):
    def test_each_shape_is_accepted_and_near_the_longest_pattern(self):
        # Near: a shape stops where its next part would not fit (the optional atoms, where no
        # character is left that another atom does not hold).
        for shape in bench.SHAPES:
            for seed in (0, 1, len(bench.LITERALS), bench.SHAPE_SEEDS - 1):
                with self.subTest(shape=shape.__name__, seed=seed):
                    text = shape(seed)
                    td.compile_pattern(text)
                    self.assertGreater(len(text), 200)
                    self.assertLessEqual(len(text), td.MAX_PATTERN_LENGTH)

    def test_a_rounds_file_is_about_a_megabyte_inside_every_limit_and_loads(self):
        data = bench.build_contracts(bench.round_seed(1))
        self.assertGreater(len(data), 1_000_000)
        self.assertLessEqual(len(data), td.MAX_CONTRACTS_BYTES)
        self.assertEqual(len(td.parse_contracts(data)), bench.TOOLS)
        self.assertEqual(len(set(patterns_of(data))), bench.PATTERNS_PER_FILE)

    def test_no_two_rounds_share_a_pattern_up_to_the_last_one(self):
        def round_patterns(number: int) -> set[str]:
            return set(patterns_of(bench.build_contracts(bench.round_seed(number), tools=4)))

        # A round's patterns run from its seed on: the first tools of each round stand for all.
        last = bench.MAX_ROUNDS
        self.assertEqual(round_patterns(0) & round_patterns(1), set())
        self.assertEqual(round_patterns(last - 1) & round_patterns(last), set())
        self.assertLess(bench.round_seed(last + 1) // len(bench.SHAPES), bench.SHAPE_SEEDS)

    def test_the_smaller_files_share_no_pattern_with_any_round_nor_each_other(self):
        def patterns(seed: int, tools: int) -> set[str]:
            return set(patterns_of(bench.build_contracts(seed, tools=tools)))

        last = bench.MAX_ROUNDS
        small, quarter = bench.SWEEP_TOOLS
        self.assertEqual(bench.SWEEP_TOOLS, (16, 32))
        rounds = set().union(*(patterns(bench.round_seed(number), bench.TOOLS) for number in (0, 1, last)))
        sweeps = [patterns(bench.sweep_seed(number, tools), tools)
                  for number in (0, 1, last) for tools in (small, quarter)]
        self.assertEqual([len(found) for found in sweeps],
                         [2 * bench.PROPERTIES * tools for tools in (small, quarter)] * 3)
        self.assertEqual(len(set().union(*sweeps)), sum(len(found) for found in sweeps))
        self.assertEqual(rounds & set().union(*sweeps), set())
        # The last round's last smaller file still draws texts no other seed gave.
        self.assertLess((bench.sweep_seed(last, quarter) + 2 * bench.PROPERTIES * quarter) // len(bench.SHAPES),
                        bench.SHAPE_SEEDS)


class TestReport(unittest.TestCase):
    def test_the_ratio_is_the_median_of_same_round_ratios(self):
        def sizes(load: float, small: float) -> dict[int, tuple[int, float]]:
            return {16: (100_000, small), 32: (200_000, 2 * small), 128: (1_000_000, load)}

        rounds = [{"bytes": 1_000_000, "json_loads": 0.004, "parse_contracts": 0.4, "first_checks": 0.028,
                   "sizes": sizes(0.4, 0.04)},
                  {"bytes": 1_000_000, "json_loads": 0.002, "parse_contracts": 0.3, "first_checks": 0.014,
                   "sizes": sizes(0.3, 0.02)},
                  {"bytes": 1_000_000, "json_loads": 0.010, "parse_contracts": 0.5, "first_checks": 0.028,
                   "sizes": sizes(0.5, 0.1)}]
        result = bench.report(rounds, quick=False, load_before=[0.5, 0.5, 0.5])
        self.assertEqual(result["ratio_to_json_loads"], 100.0)  # 100x, 150x and 50x
        self.assertEqual(result["parse_contracts"], {"median_ms": 400.0, "min_ms": 300.0})
        self.assertEqual(result["first_check_per_pattern"], {"median_ms": 1.0, "min_ms": 0.5})
        self.assertEqual(result["us_per_byte"], 0.4)
        self.assertIn("100.0x", bench.render(result))
        # Per byte: 0.4, 0.2 and 1.0 us at 16 tools, 0.4, 0.3 and 0.5 us at 128: ratios 1, 1.5 and 0.5.
        self.assertEqual(result["sizes"], [{"tools": 16, "bytes": 100_000, "us_per_byte": 0.4},
                                           {"tools": 32, "bytes": 200_000, "us_per_byte": 0.4},
                                           {"tools": 128, "bytes": 1_000_000, "us_per_byte": 0.4}])
        self.assertEqual(result["linearity"], {"of": "128 tools", "to": "16 tools", "ratio": 1.0, "spread": [0.5, 1.5]})
        self.assertIn("1.00x [0.50, 1.50] (1x: linear)", bench.render(result))


class TestCommandLine(unittest.TestCase):
    def run_main(self, *argv: str) -> tuple[int, str, str, list[tuple[int, bool]]]:
        """main() with the measuring replaced: its status, stdout, stderr and the (rounds, quick) asked for."""
        asked: list[tuple[int, bool]] = []

        def collect(rounds: int, *, quick: bool) -> list[dict[str, float]]:
            asked.append((rounds, quick))
            return []

        out, err = io.StringIO(), io.StringIO()
        with mock.patch.object(bench, "collect", collect), mock.patch.object(bench, "report", lambda *a, **k: {}), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = bench.main(["--json", *argv])
        return status, out.getvalue(), err.getvalue(), asked

    def test_rounds_both_sides_of_the_limit(self):
        for argv, asked in ((("--quick",), [(1, True)]), ((), [(7, False)]), (("--rounds", "1"), [(1, False)]),
                            (("--rounds", str(bench.MAX_ROUNDS)), [(bench.MAX_ROUNDS, False)])):
            with self.subTest(argv=argv):
                self.assertEqual(self.run_main(*argv), (0, "{}\n", "", asked))
        for rounds in ("0", "-3", str(bench.MAX_ROUNDS + 1), "x", "1.5"):
            with self.subTest(rounds=rounds):
                status, out, err, asked = self.run_main("--rounds", rounds)
                self.assertEqual((status, json.loads(out), err, asked), (2, USAGE, "", []))

    def test_a_bad_command_line_is_the_failure_shape(self):
        for argv in (("--bogus",), ("--rounds",), ("extra",), ("--quic",)):
            with self.subTest(argv=argv):
                status, out, err, asked = self.run_main(*argv)
                self.assertEqual((status, json.loads(out), err, asked), (2, USAGE, "", []))

    def test_ctrl_c_is_exit_130_in_the_failure_shape(self):
        def interrupted(*_args: Any, **_kwargs: Any) -> Any:
            raise KeyboardInterrupt

        out, err = io.StringIO(), io.StringIO()
        with mock.patch.object(bench, "collect", interrupted), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            status = bench.main(["--quick"])
        self.assertEqual((status, json.loads(out.getvalue())["error"]["code"], err.getvalue()),
                         (130, "CLI_INTERRUPTED", ""))


if __name__ == "__main__":
    unittest.main()
