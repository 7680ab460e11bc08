"""The hostile-artifact fixture: the shipped cases from the command line, and the fixture's own rules.

    python -B -m unittest discover -s artifacts -p 'test_hostile.py'
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))  # before the repository root: the module, not the package folder

if __package__:  # discovered from the repository root, as the package artifacts
    from . import hostile, makers
else:
    import hostile  # noqa: E402
    import makers  # noqa: E402

import tool_dispatcher as td  # noqa: E402

SHIPPED = HERE / "hostile-artifacts.json"
SCRIPT = HERE / "hostile.py"


def shipped() -> dict:
    return json.loads(SHIPPED.read_bytes())


def parse(document: dict) -> hostile.HostileFixture:
    return hostile.parse_fixture(json.dumps(document).encode())


def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-B", "-W", "error", str(SCRIPT), *arguments], capture_output=True,
                          text=True, timeout=120, cwd=HERE.parent)


class TestShippedFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.done = cli("--fixture", str(SHIPPED))
        cls.summary = json.loads(cls.done.stdout)

    def test_every_case_gives_its_outcome_from_the_command_line(self):
        self.assertEqual((self.done.returncode, self.done.stderr), (0, ""))
        self.assertIs(self.summary["passed"], True)
        self.assertEqual(self.summary["failed"], [])
        document = shipped()
        self.assertEqual(self.summary["cases"], len(document["cases"]))
        self.assertEqual([result["id"] for result in self.summary["results"]], [case["id"] for case in document["cases"]])
        self.assertEqual([result["got"] for result in self.summary["results"]],
                         [case["expect"] for case in document["cases"]])

    def test_hostile_cases_outnumber_the_controls_and_every_check_has_both(self):
        results = self.summary["results"]
        refused = [result for result in results if result["got"] != hostile.ADMITTED]
        self.assertEqual(self.summary["refused"], len(refused))
        self.assertGreater(len(refused), 3 * (len(results) - len(refused)))
        for check in sorted({result["check"] for result in results}):
            outcomes = {result["got"] == hostile.ADMITTED for result in results if result["check"] == check}
            self.assertEqual(outcomes, {True, False}, check)

    def test_every_maker_is_used_and_makes_the_same_bytes_twice(self):
        used = {case["target"] for case in shipped()["cases"] if case["check"] == "bytes"}
        self.assertEqual(used, set(makers.MAKERS))
        for name, make in makers.MAKERS.items():
            self.assertEqual(make(), make(), name)

    def test_one_case_by_its_id(self):
        done = cli("--fixture", str(SHIPPED), "--case", "png-zip-polyglot")
        self.assertEqual(done.returncode, 0)
        self.assertEqual(json.loads(done.stdout)["results"],
                         [{"id": "png-zip-polyglot", "check": "bytes", "expect": "ARTIFACT_POLYGLOT",
                           "got": "ARTIFACT_POLYGLOT", "passed": True}])


class TestOutcomes(unittest.TestCase):
    def test_a_case_that_does_not_give_its_expectation_fails_the_run_with_exit_1(self):
        document = shipped()
        case = next(case for case in document["cases"] if case["id"] == "zip-bomb")
        case["expect"] = "ARTIFACT_ARCHIVE_ENTRIES"
        summary = hostile.run_fixture(parse(document), case_id="zip-bomb")
        self.assertEqual((summary["passed"], summary["failed"]), (False, ["zip-bomb"]))
        self.assertEqual(summary["results"][0]["got"], "ARTIFACT_ARCHIVE_RATIO")
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "cases.json"
            path.write_text(json.dumps(document))
            done = cli("--fixture", str(path))
        self.assertEqual(done.returncode, 1)
        self.assertEqual(json.loads(done.stdout)["failed"], ["zip-bomb"])

    def test_a_control_that_is_refused_fails(self):
        document = shipped()
        case = next(case for case in document["cases"] if case["id"] == "png-control")
        case["setting"] = "image/gif"
        result = hostile.run_fixture(parse(document), case_id="png-control")["results"][0]
        self.assertEqual((result["got"], result["passed"]), ("ARTIFACT_TYPE_MISMATCH", False))

    def test_a_check_that_breaks_is_a_failed_case_never_a_crash(self):
        def broken() -> bytes:
            raise RuntimeError("a maker or a check with a bug")
        fixture = parse(shipped())
        with mock.patch.object(hostile, "MAKERS", {**makers.MAKERS, "png": broken}):
            result = hostile.run_fixture(fixture, case_id="png-control")["results"][0]
        self.assertEqual((result["got"], result["passed"]), ("UNEXPECTED_ERROR", False))

    def test_a_scene_makes_every_folder_above_its_entries(self):
        document = shipped()
        case = next(case for case in document["cases"] if case["id"] == "file-control")
        case["target"] = "notes/deeper/still/a.txt"  # two folders the scene's root does not hold yet
        case["setting"] = [{"kind": "file", "name": "root/notes/deeper/still/a.txt", "size": 12}]
        result = hostile.run_fixture(parse(document), case_id="file-control")["results"][0]
        self.assertEqual((result["got"], result["passed"]), (hostile.ADMITTED, True))

    def test_an_unknown_case_id(self):
        with self.assertRaises(hostile.FixtureError) as raised:
            hostile.run_fixture(parse(shipped()), case_id="no-such-case")
        self.assertEqual(raised.exception.code, "HOSTILE_CASE_UNKNOWN")


class TestFixtureRules(unittest.TestCase):
    def refused_at(self, document: dict, at: str) -> None:
        with self.assertRaises(hostile.FixtureError) as raised:
            parse(document)
        self.assertEqual((raised.exception.code, raised.exception.at), ("HOSTILE_FIXTURE_INVALID", at))

    def test_the_root(self):
        document = shipped()
        self.refused_at({**document, "format": "hostile-artifacts-v0"}, "fixture.format")
        self.refused_at({**document, "extra": 1}, "fixture")
        self.refused_at({**document, "cases": []}, "fixture")
        self.refused_at({**document, "policies": []}, "fixture")
        self.refused_at({**document, "policies": {**document["policies"], "not an identifier": document["policies"]["images"]}},
                        "fixture.policies")

    def test_a_case_is_exactly_its_fields_of_their_types(self):
        for change, at in (({"extra": 1}, "cases[0]"), ({"id": ""}, "cases[0].id"), ({"why": 7}, "cases[0].why"),
                           ({"target": None}, "cases[0].target"), ({"expect": ["ARTIFACT_EMPTY"]}, "cases[0].expect"),
                           ({"policy": "no-such-policy"}, "cases[0].policy"), ({"check": "shell"}, "cases[0].policy"),
                           ({"target": "no_such_maker"}, "cases[0].target"),
                           ({"expect": "NOT_A_CODE"}, "cases[0].expect"), ({"expect": "JSON_INVALID"}, "cases[0].expect")):
            document = shipped()
            document["cases"][0].update(change)
            self.refused_at(document, at)
        document = shipped()
        del document["cases"][0]["why"]
        self.refused_at(document, "cases[0]")

    def test_a_case_names_a_policy_of_its_own_check(self):
        for index, policy in ((0, "files"), (0, "web"), (file_case(), "images"), (url_case(), "files")):
            document = shipped()
            document["cases"][index]["policy"] = policy
            self.refused_at(document, f"cases[{index}].policy")

    def test_a_scene_is_a_short_list_of_known_entries_inside_its_folder(self):
        index = file_case()
        for scene, at in (({"kind": "file"}, ""), ([{"kind": "socket", "name": "root/s"}], "[0]"),
                          ([{"kind": "file", "name": "root/a", "size": 1, "to": "x"}], "[0]"),
                          ([{"kind": "file", "name": "../a", "size": 1}], "[0].name"),
                          ([{"kind": "file", "name": "/tmp/a", "size": 1}], "[0].name"),
                          ([{"kind": "file", "name": "root//a", "size": 1}], "[0].name"),
                          ([{"kind": "file", "name": "root\\a", "size": 1}], "[0].name"),
                          ([{"kind": "file", "name": "root/a", "size": -1}], "[0].size"),
                          ([{"kind": "file", "name": "root/a", "size": True}], "[0].size"),
                          ([{"kind": "hardlink", "name": "root/a", "to": "../../etc/passwd"}], "[0].to"),
                          ([{"kind": "symlink", "name": "root/a", "to": ""}], "[0].to")):
            document = shipped()
            document["cases"][index]["setting"] = scene
            self.refused_at(document, f"cases[{index}].setting{at}")
        document = shipped()
        document["cases"][index]["setting"] = [{"kind": "symlink", "name": "root/a", "to": "/etc/passwd"}]
        self.assertEqual(parse(document).cases[index].setting[0].to, "/etc/passwd")  # pointing out is the test

    def test_scene_bounds_both_sides(self):
        index = file_case()
        document = shipped()
        document["cases"][index]["setting"] = [{"kind": "folder", "name": f"root/d{n}"}
                                               for n in range(hostile.MAX_SCENE_ENTRIES)]
        self.assertEqual(len(parse(document).cases[index].setting), hostile.MAX_SCENE_ENTRIES)
        document["cases"][index]["setting"].append({"kind": "folder", "name": "root/one-more"})
        self.refused_at(document, f"cases[{index}].setting")
        document = shipped()
        document["cases"][index]["setting"] = [{"kind": "file", "name": "root/a",
                                                "size": hostile.MAX_SCENE_FILE_BYTES}]
        self.assertEqual(parse(document).cases[index].setting[0].size, hostile.MAX_SCENE_FILE_BYTES)
        document["cases"][index]["setting"][0]["size"] += 1
        self.refused_at(document, f"cases[{index}].setting[0].size")

    def test_resolver_answers_are_null_or_a_short_map_of_address_lists(self):
        index = url_case()
        for answers, at in (([], ""), ({"a.example": "10.0.0.1"}, ".a.example"), ({"a.example": [7]}, ".a.example"),
                            ({f"n{n}.example": [] for n in range(hostile.MAX_LIST_ITEMS + 1)}, ""),
                            ({"a.example": ["10.0.0.1"] * (hostile.MAX_LIST_ITEMS + 1)}, ".a.example")):
            document = shipped()
            document["cases"][index]["setting"] = answers
            self.refused_at(document, f"cases[{index}].setting{at}")
        document = shipped()
        document["cases"][index]["setting"] = {f"n{n}.example": ["93.184.215.14"] * hostile.MAX_LIST_ITEMS
                                               for n in range(hostile.MAX_LIST_ITEMS)}
        self.assertEqual(len(parse(document).cases[index].setting), hostile.MAX_LIST_ITEMS)

    def test_ids_are_unique(self):
        document = shipped()
        document["cases"][1]["id"] = document["cases"][0]["id"]
        self.refused_at(document, "fixture.cases")

    def test_a_policy_the_layer_refuses_is_refused_at_its_name(self):
        for change in ({"max_bytes": 0}, {"allowed": ["image/x-icon"]}, {"allowed": "image/png"},
                       {"allow_active": "no"}, {"archives": {"max_entries": 1}}, {"extra": True}):
            document = shipped()
            document["policies"]["images"].update(change)
            self.refused_at(document, "policies.images")
        document = shipped()
        document["policies"]["archives"]["archives"]["max_ratio"] = 0
        self.refused_at(document, "policies.archives")
        for name, change in (("files", {"max_bytes": -1}), ("files", {"suffixes": ["txt"]}), ("files", {"extra": 1}),
                             ("web", {"schemes": ["javascript:"]}), ("web", {"ports": [0]}),
                             ("web", {"allowed_networks": ["not a network"]}), ("web", {"allowed_networks": "any"})):
            document = shipped()
            document["policies"][name].update(change)
            self.refused_at(document, f"policies.{name}")
        document = shipped()
        document["policies"]["files"]["check"] = "shell"
        self.refused_at(document, "policies.files")

    def test_text_length_both_sides(self):
        document = shipped()
        document["cases"][0]["why"] = "x" * hostile.MAX_TEXT
        self.assertEqual(parse(document).cases[0].why, "x" * hostile.MAX_TEXT)
        document["cases"][0]["why"] += "x"
        self.refused_at(document, "cases[0].why")

    def test_case_count_both_sides(self):
        document = shipped()
        template = document["cases"][0]
        document["cases"] = [{**template, "id": f"case-{index}"} for index in range(hostile.MAX_CASES)]
        self.assertEqual(len(parse(document).cases), hostile.MAX_CASES)
        document["cases"].append({**template, "id": "one-more"})
        self.refused_at(document, "fixture")

    def test_fixture_size_both_sides(self):
        document = shipped()
        text = json.dumps(document)
        padded = text[:-1] + " " * (hostile.MAX_FIXTURE_BYTES - len(text)) + "}"
        self.assertEqual(len(padded), hostile.MAX_FIXTURE_BYTES)
        self.assertEqual(len(hostile.parse_fixture(padded.encode()).cases), len(document["cases"]))
        with self.assertRaises(td.BoundaryError) as raised:
            hostile.parse_fixture((padded[:-1] + " }").encode())
        self.assertEqual(raised.exception.code, "JSON_TOO_LARGE")


class TestCommandLine(unittest.TestCase):
    def failure(self, done: subprocess.CompletedProcess[str], code: str) -> None:
        self.assertEqual((done.returncode, done.stderr), (2, ""))
        self.assertEqual(json.loads(done.stdout), {"passed": False, "error": td.error_view(code)}
                         if code in td.ERROR_CATALOG else
                         {"passed": False, "error": hostile.FixtureError(code).to_json()})

    def test_refusals_are_the_one_failure_shape(self):
        self.failure(cli(), "CLI_USAGE")
        self.failure(cli("--fixture", str(SHIPPED), "--fix", "x"), "CLI_USAGE")
        self.failure(cli("--fixture", str(HERE / "no-such-file.json")), "FIXTURE_UNREADABLE")
        self.failure(cli("--fixture", str(HERE)), "FIXTURE_UNREADABLE")
        self.failure(cli("--fixture", str(SHIPPED), "--case", "no-such-case"), "HOSTILE_CASE_UNKNOWN")
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "cases.json"
            path.write_text('{"format": "hostile-artifacts-v1", "format": "twice"}')
            self.failure(cli("--fixture", str(path)), "JSON_DUPLICATE_KEY")
            document = shipped()
            document["cases"][3]["expect"] = "NOT_A_CODE"
            path.write_text(json.dumps(document))
            done = cli("--fixture", str(path))
        self.assertEqual(done.returncode, 2)
        self.assertEqual(json.loads(done.stdout)["error"]["at"], "cases[3].expect")
        self.assertNotIn(os.sep + "tmp", done.stdout)


def file_case() -> int:
    return next(index for index, case in enumerate(shipped()["cases"]) if case["check"] == "file")


def url_case() -> int:
    return next(index for index, case in enumerate(shipped()["cases"]) if case["check"] == "url")


if __name__ == "__main__":
    unittest.main()
