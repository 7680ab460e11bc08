"""The benchmark's command line: every refusal in the project's failure shape, both sides of each limit.

Nothing here times anything: the measuring functions are replaced, so the suite stays fast and
asserts no figure.
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
import bench_dispatcher as bench  # noqa: E402

USAGE = {"passed": False, "error": {"code": "CLI_USAGE", "message": "The command line is not valid; see --help.",
                                    "retryable": False}}


class TestCommandLine(unittest.TestCase):
    def run_main(self, *argv: str) -> tuple[int, str, str, list[tuple[int, int]]]:
        """main() with the measuring replaced: its status, stdout, stderr and the (rounds, sample ns) asked for."""
        asked: list[tuple[int, int]] = []

        def collect(rounds: int, batch_ns: int, *, quick: bool) -> tuple[list[Any], dict[str, Any], dict[str, str]]:
            asked.append((rounds, batch_ns))
            return [], {}, {}

        out, err = io.StringIO(), io.StringIO()
        with mock.patch.object(bench, "collect", collect), mock.patch.object(bench, "report", lambda *a, **k: {}), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = bench.main(["--json", *argv])
        return status, out.getvalue(), err.getvalue(), asked

    def test_rounds_both_sides_of_the_limit(self) -> None:
        for rounds, asked in (("1", [(1, 1_000_000)]), (str(bench.MAX_ROUNDS), [(bench.MAX_ROUNDS, 1_000_000)])):
            with self.subTest(rounds=rounds):
                self.assertEqual(self.run_main("--quick", "--rounds", rounds), (0, "{}\n", "", asked))
        for rounds in ("0", "-3", str(bench.MAX_ROUNDS + 1), "x", "1.5"):
            with self.subTest(rounds=rounds):
                status, out, err, asked = self.run_main("--rounds", rounds)
                self.assertEqual((status, json.loads(out), err, asked), (2, USAGE, "", []))

    def test_sample_length_both_sides_of_the_limit(self) -> None:
        for sample_ms, batch_ns in (("0.1", 100_000), ("1000", 1_000_000_000)):
            with self.subTest(sample_ms=sample_ms):
                self.assertEqual(self.run_main("--sample-ms", sample_ms), (0, "{}\n", "", [(31, batch_ns)]))
        for sample_ms in ("0.09", "1000.1", "-1", "0", "nan", "inf", "-inf", "x"):
            with self.subTest(sample_ms=sample_ms):
                status, out, err, asked = self.run_main("--sample-ms", sample_ms)
                self.assertEqual((status, json.loads(out), err, asked), (2, USAGE, "", []))

    def test_a_bad_command_line_is_the_failure_shape(self) -> None:
        for argv in (("--bogus",), ("--rounds",), ("extra",), ("--", "--quick")):
            with self.subTest(argv=argv):
                status, out, err, asked = self.run_main(*argv)
                self.assertEqual((status, json.loads(out), err, asked), (2, USAGE, "", []))

    def test_ctrl_c_is_exit_130_in_the_failure_shape(self) -> None:
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
