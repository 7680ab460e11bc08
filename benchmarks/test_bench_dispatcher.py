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



class TestFloors(unittest.TestCase):
    """The write's and the verification's floors are held to the module, as the read's floor is."""

    orders = {(order.tenant, order.order_ref): order for order in bench.ORDERS}

    def floor_write(self, ledger: Any, index: int, **changes: Any) -> dict[str, Any]:
        context, approval = bench.write_call(index)
        if changes:
            approval = bench.replace(approval, **changes)
        return bench.floor_create_refund_draft(bench.REFUND, context, bench.PRINCIPAL, approval, self.orders, ledger,
                                               bench.NOW, bench.DEADLINE)

    def test_the_write_floor_rebuilds_each_fresh_write_byte_for_byte(self) -> None:
        dispatcher, ledger = bench.new_dispatcher(), bench.FloorLedger()
        for index in range(3):
            package = bench.write_once(dispatcher, *bench.write_call(index))
            self.assertEqual(bench.td.canonical_text(self.floor_write(ledger, index)),
                             bench.td.canonical_text(package))
        self.assertEqual((len(ledger.records), len(ledger.consumed), len(ledger.effects)), (3, 3, 3))

    def test_the_write_floor_refuses_a_used_key_and_an_approval_for_another_call(self) -> None:
        ledger = bench.FloorLedger()
        self.floor_write(ledger, 0)
        with self.assertRaisesRegex(ValueError, "^floor: idempotency$"):
            self.floor_write(ledger, 0)  # the same key again: no fresh write
        for changes in ({"call_id": "call_other"}, {"arguments": {"order_ref": "ORDER-7", "reason": "other"}},
                        {"approver": "approver-unknown"}, {"expires_at": bench.NOW}):
            with self.subTest(changes=changes), self.assertRaisesRegex(ValueError, "^floor: approval$"):
                self.floor_write(ledger, 1, **changes)
        self.assertEqual((len(ledger.records), len(ledger.effects)), (1, 1))  # nothing refused left a trace
        self.floor_write(ledger, 1, expires_at=bench.NOW + 1)  # live one second more: taken
        self.assertEqual((len(ledger.records), len(ledger.effects)), (2, 2))

    def test_the_verification_floor_refuses_every_forgery_the_verifier_refuses(self) -> None:
        package = bench.read_once(bench.new_dispatcher())
        refused_by_verifier = 0
        for forged in bench.floor_forgeries(package):
            try:
                bench.td.verify_package(forged, context=bench.READ_CONTEXT, principal=bench.PRINCIPAL)
            except bench.td.BoundaryError:
                refused_by_verifier += 1
        self.assertGreater(refused_by_verifier, 250)
        self.assertEqual(bench.check_verify_floor(package, bench.READ_CONTEXT, bench.PRINCIPAL), refused_by_verifier)

    def test_a_floor_that_takes_a_forgery_ends_the_benchmark(self) -> None:
        package = bench.read_once(bench.new_dispatcher())
        taken: list[Any] = []
        with mock.patch.object(bench, "floor_verify_get_order", lambda forged, *_args: taken.append(forged)):
            with self.assertRaisesRegex(SystemExit, "verification floor accepts a package verify_package refuses"):
                bench.check_verify_floor(package, bench.READ_CONTEXT, bench.PRINCIPAL)
        self.assertEqual(len(taken), 2)  # the package itself, then the first forgery the verifier refuses

    def test_the_verification_floor_refuses_another_context_or_principal(self) -> None:
        package = bench.read_once(bench.new_dispatcher())
        bench.floor_verify_get_order(package, bench.READ_CONTEXT, bench.PRINCIPAL)
        for context, principal in ((bench.replace(bench.READ_CONTEXT, call_id="call_02"), bench.PRINCIPAL),
                                   (bench.READ_CONTEXT, bench.td.Principal("tenant-a", "bob", ("orders.read",)))):
            with self.subTest(context=context, principal=principal), self.assertRaises(ValueError):
                bench.floor_verify_get_order(package, context, principal)

class TestItsFloor(unittest.TestCase):
    """A target set against another path is printed with the ratio that path's own floor reaches."""

    # Three rounds of each line. Medians of the per-round ratios: the write 2.5x the read, its floor
    # 1.8x; the verification 1.1x, its floor 1.1x (1.2, 1.1, 1.1).
    ROUNDS = {"dispatch_read": (10, 20, 40), "write_fresh": (30, 50, 90), "write_floor": (18, 34, 76),
              "verify_package": (11, 22, 48), "verify_floor": (12, 22, 44)}

    @staticmethod
    def measured(key: str, section: str, *samples: float) -> Any:
        return bench.Measurement(key, section, key.replace("_", " "), lambda _n: lambda: None,
                                 samples=list(samples))

    def result(self, **samples: tuple[float, ...]) -> dict[str, Any]:
        measurements = [self.measured(key, "dispatch", *values) for key, values in samples.items()]
        facts = {"fixture_bytes": 1, "fixture_cases": 1, "deep_document_levels": 1, "deep_document_bytes": 1}
        return bench.report(measurements, facts, {}, rounds=3, quick=False)

    def test_each_round_sets_the_floor_against_the_same_denominator(self) -> None:
        ratios = self.result(**self.ROUNDS)["ratios"]
        self.assertEqual((ratios["write_vs_read"]["value"], ratios["write_vs_read"]["holds"]), (2.5, False))
        self.assertEqual(ratios["write_vs_read"]["its_floor"],
                         {"of": "write_floor", "value": 1.8, "target_below_it": False})
        self.assertEqual(ratios["verify_vs_dispatch"]["its_floor"],
                         {"of": "verify_floor", "value": 1.1, "target_below_it": True})
        for key, ratio in ratios.items():  # only the two targets set against another path carry one
            with self.subTest(key=key):
                self.assertEqual("its_floor" in ratio, key in ("write_vs_read", "verify_vs_dispatch"))

    def test_a_target_equal_to_its_floor_is_not_below_it(self) -> None:
        ratios = self.result(dispatch_read=(10,), write_fresh=(25,), write_floor=(20,), verify_package=(6,),
                             verify_floor=(5,))["ratios"]
        self.assertEqual((ratios["write_vs_read"]["its_floor"], ratios["verify_vs_dispatch"]["holds"]),
                         ({"of": "write_floor", "value": 2.0, "target_below_it": False}, True))
        self.assertEqual(ratios["verify_vs_dispatch"]["its_floor"]["target_below_it"], False)  # 0.5x < 0.6x

    def test_no_floor_measured_no_floor_printed(self) -> None:
        result = self.result(dispatch_read=(10, 20), write_fresh=(30, 50))
        self.assertNotIn("its_floor", result["ratios"]["write_vs_read"])
        self.assertNotIn("its floor", bench.render_table(result))

    def test_the_table_prints_it_beside_the_target(self) -> None:
        table = bench.render_table(self.result(**self.ROUNDS))
        lines = table.splitlines()
        write = next(line for line in lines if line.startswith("  write fresh "))
        verify = next(line for line in lines if line.startswith("  verify package "))
        self.assertTrue(write.endswith("fresh read        <= 2x MISS (its floor 1.80x)"), write)
        self.assertTrue(verify.endswith("fresh read        <= 0.6x MISS (its floor 1.10x)"), verify)
        self.assertEqual(lines[-2], "its floor: the same ratio with the line's straight-line floor in its place; "
                                    "a target below it asks for less time than that floor takes")


if __name__ == "__main__":
    unittest.main()
