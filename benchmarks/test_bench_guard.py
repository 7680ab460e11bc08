"""The guard benchmark: it runs and reports its documented figures, its ratios are medians of
same-round ratios, it leaves no process and no file behind on any path (Ctrl-C included), and its
command line answers in the project's failure shape.

Nothing here asserts a timing: the real runs are checked for their keys and for positive numbers
only, and every wait is a bound (WAIT), never a measure.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_guard as bench  # noqa: E402

ROOT = HERE.parent
WAIT = 60  # seconds a run or a process's exit may take on a loaded machine: a bound, never a measure
USAGE = {"passed": False, "error": {"code": "CLI_USAGE", "message": "The command line is not valid; see --help.",
                                    "retryable": False}}
INTERRUPTED = {"passed": False, "error": {"code": "CLI_INTERRUPTED",
                                          "message": "The command was interrupted before it finished.",
                                          "retryable": False}}
LINE_KEYS = {"label", "calls_per_round", "guarded_adds", "direct", "guarded", "ratio", "ratio_spread", "added_us"}
REPORT_KEYS = {"benchmark", "python", "implementation", "cpu_model", "cpu_count", "load_average_before",
               "load_average_after", "quick", "rounds", "lines", "ratio_method"}


def interpreter() -> list[str]:
    """This interpreter with this run's flags (-O, -W error), and -B: the child runs as the suite does."""
    return [sys.executable, "-B", *(["-O"] * sys.flags.optimize), *(f"-W{option}" for option in sys.warnoptions)]


def checkout_files() -> set[str]:
    """Every file of the checkout (its .git aside): a run must add none, a __pycache__ included."""
    found = set()
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [name for name in dirs if name != ".git"]
        found.update(str(Path(folder, name).relative_to(ROOT)) for name in names)
    return found


def processes_naming(*texts: str, environment: str | None = None) -> list[int]:
    """The processes whose command line holds every one of `texts` and, if given, whose environment
    holds the entry `environment` (Linux's /proc; a process that exited has neither)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    command = handle.read()
                if environment is not None:
                    with open(f"/proc/{entry}/environ", "rb") as handle:
                        if environment.encode() not in handle.read().split(b"\0"):
                            continue
            except OSError:
                continue  # it left while we looked, or is not ours to read
            if all(text.encode() in command for text in texts):
                found.append(int(entry))
    return found


def wait_until(condition: Any) -> bool:
    until = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > until:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def recorded_spawns() -> Any:
    """Every server process this process starts (McpClient's spawn), to see each one stopped."""
    started: list[subprocess.Popen[bytes]] = []
    real = bench.mcp_client.spawn

    def spawn(command: Any, **options: Any) -> subprocess.Popen[bytes]:
        process = real(command, **options)
        started.append(process)
        return process

    with mock.patch.object(bench.mcp_client, "spawn", spawn):
        yield started


def rounds_of(*ratios: tuple[int, int]) -> list[dict[str, Any]]:
    """Made-up rounds: each (direct, guarded) median in ns for every line, the fastest call half of it."""
    return [{line.key: {side: {"median_ns": value, "min_ns": value // 2} for side, value in
                        (("direct", direct), ("guarded", guarded))} for line in bench.LINES}
            for direct, guarded in ratios]


class TestReport(unittest.TestCase):
    def test_the_ratio_is_the_median_of_same_round_ratios_with_its_spread(self):
        result = bench.report(rounds_of((100_000, 500_000), (200_000, 400_000), (100_000, 1_100_000)),
                              quick=False, load_before=[0.5, 0.5, 0.5])
        for line in bench.LINES:
            with self.subTest(line=line.key):
                found = result["lines"][line.key]
                self.assertEqual(found["ratio"], 5.0)  # 5x, 2x and 11x
                self.assertEqual(found["ratio_spread"], [2.0, 11.0])
                self.assertEqual(found["added_us"], 400.0)  # 400, 200 and 1,000 us
                self.assertEqual(found["direct"], {"median_us": 100.0, "min_us": 50.0})
                self.assertEqual(found["guarded"], {"median_us": 500.0, "min_us": 200.0})
        self.assertIn("5.00x  [2.00, 11.00]", bench.render(result))

    def test_every_line_says_what_its_guarded_side_adds(self):
        result = bench.report(rounds_of((1, 2)), quick=True, load_before=None)
        self.assertEqual(list(result["lines"]), ["stdio_read", "in_process_read", "in_process_write"])
        self.assertIn("approval", result["lines"]["in_process_write"]["guarded_adds"])
        self.assertIn("stdio hop", result["lines"]["stdio_read"]["guarded_adds"])


class TestRun(unittest.TestCase):
    def test_quick_json_runs_and_gives_the_documented_keys_with_positive_numbers(self):
        before = checkout_files()
        out, err = io.StringIO(), io.StringIO()
        with recorded_spawns() as started, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = bench.main(["--quick", "--json"])
        self.assertEqual((status, err.getvalue()), (0, ""))
        result = json.loads(out.getvalue())
        self.assertEqual(set(result), REPORT_KEYS)
        self.assertEqual((result["benchmark"], result["quick"], result["rounds"]), ("mcp_guard", True, 2))
        self.assertEqual(list(result["lines"]), [line.key for line in bench.LINES])
        for key, line in result["lines"].items():
            with self.subTest(line=key):
                self.assertEqual(set(line), LINE_KEYS)
                figures = [line["ratio"], *line["ratio_spread"], *line["direct"].values(), *line["guarded"].values()]
                self.assertTrue(all(type(value) is float and value > 0 for value in figures), figures)
                self.assertLessEqual(line["ratio_spread"][0], line["ratio"])
                self.assertLessEqual(line["ratio"], line["ratio_spread"][1])
        # The import's server, the seeding one, the direct one, the guard's command, the in-process
        # guard's server: each stopped; the guard's command stopped its own server; nothing written.
        self.assertEqual(len(started), 5)
        self.assertEqual([process.returncode is None for process in started], [False] * 5)
        self.assertEqual(checkout_files(), before)

    @unittest.skipUnless(os.path.isdir("/proc"), "needs /proc to see the guard's own server")
    def test_ctrl_c_while_timing_stops_every_process_and_removes_the_folder(self):
        real = bench.measure_round

        def interrupted(sides: Any, number: int) -> Any:
            if number == 1:  # after the warm-up: every process is up and the folder full
                raise KeyboardInterrupt
            return real(sides, number)

        out, err = io.StringIO(), io.StringIO()
        with recorded_spawns() as started, mock.patch.object(bench, "measure_round", interrupted), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = bench.main(["--quick"])
        self.assertEqual((status, json.loads(out.getvalue()), err.getvalue()), (130, INTERRUPTED, ""))
        self.assertEqual([process.returncode is None for process in started], [False] * len(started))
        command = next(list(process.args) for process in started if "--dir" in process.args)
        folder = Path(command[command.index("--dir") + 1]).parent
        self.assertFalse(folder.exists())
        self.assertTrue(wait_until(lambda: not processes_naming(str(folder))), processes_naming(str(folder)))

    @unittest.skipUnless(os.path.isdir("/proc") and hasattr(signal, "SIGINT"), "needs /proc and SIGINT")
    def test_a_real_ctrl_c_answers_130_in_the_failure_shape_and_leaves_nothing(self):
        with tempfile.TemporaryDirectory() as scratch:
            # Every process of the run inherits TMPDIR, and makes its temporary folder in `scratch`.
            marker = f"TMPDIR={scratch}"
            process = subprocess.Popen([*interpreter(), str(HERE / "bench_guard.py"), "--rounds",
                                        str(bench.MAX_ROUNDS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env={**os.environ, "TMPDIR": scratch})
            try:
                # Once the guard's command runs, the run has servers, a grandchild among them: it is
                # mid-setup or timing.
                self.assertTrue(wait_until(lambda: processes_naming("guard", "host.json", environment=marker)
                                           or process.poll() is not None))
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=WAIT)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.communicate()
            self.assertEqual((process.returncode, json.loads(out), err), (130, INTERRUPTED, b""))
            self.assertTrue(wait_until(lambda: not processes_naming(environment=marker)),
                            processes_naming(environment=marker))
            self.assertEqual(os.listdir(scratch), [])


class TestCommandLine(unittest.TestCase):
    def run_main(self, *argv: str) -> tuple[int, str, str, list[int]]:
        """main() with the measuring replaced: its status, stdout, stderr and the rounds asked for."""
        asked: list[int] = []

        def collect(rounds: int) -> list[dict[str, Any]]:
            asked.append(rounds)
            return []

        out, err = io.StringIO(), io.StringIO()
        with mock.patch.object(bench, "collect", collect), mock.patch.object(bench, "report", lambda *a, **k: {}), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = bench.main(["--json", *argv])
        return status, out.getvalue(), err.getvalue(), asked

    def test_rounds_both_sides_of_the_limit(self):
        for argv, asked in ((("--quick",), [bench.QUICK_ROUNDS]), ((), [bench.DEFAULT_ROUNDS]),
                            (("--rounds", "1"), [1]), (("--rounds", str(bench.MAX_ROUNDS)), [bench.MAX_ROUNDS]),
                            (("--quick", "--rounds", "3"), [3])):
            with self.subTest(argv=argv):
                self.assertEqual(self.run_main(*argv), (0, "{}\n", "", asked))
        for rounds in ("0", "-3", str(bench.MAX_ROUNDS + 1), "x", "1.5"):
            with self.subTest(rounds=rounds):
                status, out, err, asked = self.run_main("--rounds", rounds)
                self.assertEqual((status, json.loads(out), err, asked), (2, USAGE, "", []))

    def test_the_most_rounds_leave_room_for_every_write(self):
        # Both sides write a new note per call, warm-up round included, beside the seeded note.
        self.assertLessEqual(1 + 2 * bench.WRITES_PER_ROUND * (bench.MAX_ROUNDS + 1), bench.MAX_NOTES)
        self.assertGreater(1 + 2 * bench.WRITES_PER_ROUND * (bench.MAX_ROUNDS + 2), bench.MAX_NOTES)

    def test_a_bad_command_line_is_the_failure_shape(self):
        for argv in (("--bogus",), ("--rounds",), ("extra",), ("--quic",), ("--round", "3")):
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
        self.assertEqual((status, json.loads(out.getvalue()), err.getvalue()), (130, INTERRUPTED, ""))


if __name__ == "__main__":
    unittest.main()
