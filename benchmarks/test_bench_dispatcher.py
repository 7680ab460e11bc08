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

if __name__ == "__main__":
    unittest.main()
