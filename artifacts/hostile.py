"""The hostile-artifact fixture: artifacts made by code, each run through the layer's checks, each
expected to be refused with one stable code (or, for the controls, admitted).

    python -B -W error artifacts/hostile.py --fixture artifacts/hostile-artifacts.json

A case names what it checks (bytes, a file under a root, a URL), what to make (a maker from
makers.MAKERS, a scene of files, a URL and what a resolver answers for its names), the policy it
runs under, and the outcome it expects. No sample file is stored: every byte is made by the run.
Exit 0: every case gave its expected outcome. Exit 1: the fixture loaded but some case did not.
Exit 2: the fixture or the command line was refused. The output is one JSON object, never a
traceback or a local path, as every command line of the project answers.

Sections: 1. Errors and limits   2. The fixture   3. Running a case   4. The command line
"""
from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Final, Mapping, Sequence

_HERE: Final = Path(__file__).resolve().parent
if not __package__:  # by path from a checkout: this folder first (its artifacts.py, not the package
    for _path in (str(_HERE.parent), str(_HERE)):  # folder of that name), then the repository root (the core)
        if _path in sys.path:
            sys.path.remove(_path)
        sys.path.insert(0, _path)

import tool_dispatcher as td  # noqa: E402
if __package__:  # installed as tool_dispatcher_artifacts: its siblings are the package's
    from . import artifacts as art
    from . import files, urls  # noqa: F401
    from .makers import MAKERS
else:
    import artifacts as art  # noqa: E402
    import files  # noqa: E402
    import urls  # noqa: E402
    from makers import MAKERS  # noqa: E402

__all__ = ["FIXTURE_FORMAT", "HOSTILE_CATALOG", "FixtureError", "HostileCase", "HostileFixture", "load_fixture",
           "parse_fixture", "run_case", "run_fixture", "main"]

# ============================================================================================
# 1. Errors and limits
# ============================================================================================

FIXTURE_FORMAT: Final = "hostile-artifacts-v1"
ADMITTED: Final = "admitted"  # the outcome a control case expects
MAX_FIXTURE_BYTES: Final = 262_144  # a fixture is a list of recipes, never the bytes themselves
MAX_CASES: Final = 512
MAX_TEXT: Final = 512  # characters of a case's id, reason, path or URL
MAX_SCENE_ENTRIES: Final = 32  # files, folders, links and pipes one file case builds
MAX_SCENE_FILE_BYTES: Final = 1_048_576  # a scene's file is zeros: enough to pass any size limit by one
MAX_LIST_ITEMS: Final = 16  # any list the fixture holds: allowed types or networks, a resolver's names, their addresses
SCENE_ROOT: Final = "root"  # the scene's folder the FileRoot names; every other name is outside it

HOSTILE_CATALOG: Final = MappingProxyType(td.error_specs(
    "fixture", False,
    HOSTILE_FIXTURE_INVALID="The hostile-artifact fixture is not valid.",
    HOSTILE_CASE_UNKNOWN="No case of the fixture has this id.",
))


class FixtureError(td.CatalogError):
    """A refused fixture: HOSTILE_FIXTURE_INVALID at the field that is wrong."""

    CATALOG = HOSTILE_CATALOG


# ============================================================================================
# 2. The fixture
# ============================================================================================
# Every field of a case, by what it checks. Policies are named once at the top and cases name them.


@dataclass(frozen=True, slots=True)
class HostileCase:
    id: str
    why: str
    check: str  # "bytes", "file" or "url"
    target: str  # bytes: a maker; file: a path under the scene's root; url: the URL
    setting: Any  # bytes: the declared media type; file: the scene's entries; url: the resolver's answers
    policy: str
    expect: str  # a code, or "admitted"


@dataclass(frozen=True, slots=True)
class HostileFixture:
    policies: Mapping[str, Any]  # the built MediaPolicy, FileRoot limits or UrlPolicy, by name
    cases: tuple[HostileCase, ...]


def _invalid(at: str) -> FixtureError:
    return FixtureError("HOSTILE_FIXTURE_INVALID", at)


def _fields(value: Any, names: frozenset[str], at: str) -> dict[str, Any]:
    if type(value) is not dict or value.keys() != names:
        raise _invalid(at)
    return value


def _text(value: Any, at: str) -> str:
    if type(value) is not str or not 0 < len(value) <= MAX_TEXT:
        raise _invalid(at)
    return value


def _list_of_text(value: Any, at: str) -> list[str]:
    if type(value) is not list or len(value) > MAX_LIST_ITEMS or not all(type(item) is str for item in value):
        raise _invalid(at)
    return value


def load_fixture(path: str | os.PathLike[str]) -> HostileFixture:
    """Read and check a hostile-artifacts-v1 file (FIXTURE_UNREADABLE, JSON_*, HOSTILE_FIXTURE_INVALID)."""
    return parse_fixture(td.read_bounded(path, max_bytes=MAX_FIXTURE_BYTES))


def parse_fixture(data: bytes) -> HostileFixture:
    root = _fields(td.decode_strict_json(data, max_bytes=MAX_FIXTURE_BYTES), frozenset({"format", "policies", "cases"}),
                   "fixture")
    if root["format"] != FIXTURE_FORMAT:
        raise _invalid("fixture.format")
    if type(root["policies"]) is not dict or type(root["cases"]) is not list or not 0 < len(root["cases"]) <= MAX_CASES:
        raise _invalid("fixture")
    policies = {name: _policy(raw, f"policies.{name}") for name, raw in root["policies"].items() if td.is_identifier(name)}
    if len(policies) != len(root["policies"]):
        raise _invalid("fixture.policies")
    cases = tuple(_case(raw, f"cases[{index}]", policies) for index, raw in enumerate(root["cases"]))
    if len({case.id for case in cases}) != len(cases):
        raise _invalid("fixture.cases")
    return HostileFixture(MappingProxyType(policies), cases)


def _policy(raw: Any, at: str) -> Any:
    if type(raw) is not dict or type(raw.get("check")) is not str or raw["check"] not in POLICY_BUILDERS:
        raise _invalid(at)
    try:
        return POLICY_BUILDERS[raw["check"]](raw, at)
    except (art.ArtifactError, files.FileError, urls.UrlError, TypeError):
        raise _invalid(at) from None


def _media_policy(raw: dict[str, Any], at: str) -> tuple[str, art.MediaPolicy]:
    body = _fields(raw, frozenset({"check", "allowed", "max_bytes", "allow_active", "archives"}), at)
    _list_of_text(body["allowed"], at)
    archives = None if body["archives"] is None else art.ArchivePolicy(**_fields(
        body["archives"], frozenset({"max_entries", "max_total_bytes", "max_ratio", "max_depth"}), at))
    return "bytes", art.MediaPolicy(allowed=frozenset(body["allowed"]), max_bytes=body["max_bytes"],
                                    allow_active=body["allow_active"], archives=archives)


@dataclass(frozen=True, slots=True)
class FileLimits:
    """A file policy: what the FileRoot of each file case's scene is built with."""

    max_bytes: int
    suffixes: frozenset[str] | None


def _file_policy(raw: dict[str, Any], at: str) -> tuple[str, FileLimits]:
    body = _fields(raw, frozenset({"check", "max_bytes", "suffixes"}), at)
    # The layer checks the limits, against a folder that surely exists: this one.
    root = files.FileRoot(str(_HERE), max_bytes=body["max_bytes"], suffixes=body["suffixes"])
    return "file", FileLimits(root.max_bytes, root.suffixes)


def _url_policy(raw: dict[str, Any], at: str) -> tuple[str, urls.UrlPolicy]:
    body = _fields(raw, frozenset({"check", "schemes", "ports", "allowed_networks"}), at)
    return "url", urls.UrlPolicy(schemes=body["schemes"], ports=body["ports"],
                                 allowed_networks=tuple(_list_of_text(body["allowed_networks"], at)))


POLICY_BUILDERS: Final[Mapping[str, Callable[[dict[str, Any], str], tuple[str, Any]]]] = MappingProxyType({
    "bytes": _media_policy,
    "file": _file_policy,
    "url": _url_policy,
})


def _case(raw: Any, at: str, policies: Mapping[str, tuple[str, Any]]) -> HostileCase:
    body = _fields(raw, frozenset({"id", "why", "check", "target", "setting", "policy", "expect"}), at)
    check = body["check"]
    if check not in SETTINGS or policies.get(body["policy"], ("",))[0] != check:
        raise _invalid(f"{at}.policy")
    target = _text(body["target"], f"{at}.target")
    if check == "bytes" and target not in MAKERS:
        raise _invalid(f"{at}.target")
    case = HostileCase(_text(body["id"], f"{at}.id"), _text(body["why"], f"{at}.why"), check, target,
                       SETTINGS[check](body["setting"], f"{at}.setting"), body["policy"],
                       _text(body["expect"], f"{at}.expect"))
    if case.expect != ADMITTED and case.expect not in EXPECTABLE:
        raise _invalid(f"{at}.expect")
    return case


@dataclass(frozen=True, slots=True)
class SceneEntry:
    """One thing a file case makes in its scene's folder before the check: a file of `size`
    zeros, a folder, a symbolic or hard link to `to`, or a named pipe."""

    kind: str
    name: str  # a plain relative name in the scene's folder: "root/..." lies under the FileRoot
    size: int = 0
    to: str = ""  # a symbolic link's target, as given; a hard link's, in the scene's folder


SCENE_FIELDS: Final = MappingProxyType({
    "file": frozenset({"kind", "name", "size"}),
    "folder": frozenset({"kind", "name"}),
    "symlink": frozenset({"kind", "name", "to"}),
    "hardlink": frozenset({"kind", "name", "to"}),
    "fifo": frozenset({"kind", "name"}),
})


def _plain_name(value: Any, at: str) -> str:
    name = _text(value, at)
    if name.startswith("/") or any(part in ("", ".", "..") or "\\" in part for part in name.split("/")):
        raise _invalid(at)  # the scene itself stays in its folder; only what it makes may point out
    return name


def _declared_type(raw: Any, at: str) -> str:
    return _text(raw, at)


def _scene(raw: Any, at: str) -> tuple[SceneEntry, ...]:
    if type(raw) is not list or len(raw) > MAX_SCENE_ENTRIES:
        raise _invalid(at)
    entries = []
    for index, item in enumerate(raw):
        where = f"{at}[{index}]"
        if type(item) is not dict or item.get("kind") not in SCENE_FIELDS:
            raise _invalid(where)
        body = _fields(item, SCENE_FIELDS[item["kind"]], where)
        size = body.get("size", 0)
        if type(size) is not int or not 0 <= size <= MAX_SCENE_FILE_BYTES:
            raise _invalid(f"{where}.size")
        to = ""
        if "to" in body:  # a symbolic link may point anywhere (that is the test); a hard link stays in the scene
            to = (_plain_name if body["kind"] == "hardlink" else _text)(body["to"], f"{where}.to")
        entries.append(SceneEntry(body["kind"], _plain_name(body["name"], f"{where}.name"), size, to))
    return tuple(entries)


def _answers(raw: Any, at: str) -> Mapping[str, tuple[str, ...]] | None:
    if raw is None:
        return None  # no resolver at all: a name cannot be looked up
    if type(raw) is not dict or len(raw) > MAX_LIST_ITEMS:
        raise _invalid(at)
    return MappingProxyType({_text(name, at): tuple(_list_of_text(addresses, f"{at}.{name}"))
                             for name, addresses in raw.items()})


SETTINGS: Final[Mapping[str, Callable[[Any, str], Any]]] = MappingProxyType({
    "bytes": _declared_type,
    "file": _scene,
    "url": _answers,
})


# ============================================================================================
# 3. Running a case
# ============================================================================================
# A case's outcome is "admitted" or the code its check raised; anything else that escapes a check
# is a failure of the case (UNEXPECTED_ERROR), never a crash of the run.


def _run_bytes(case: HostileCase, policy: art.MediaPolicy) -> str:
    art.admit_bytes(MAKERS[case.target](), declared_type=case.setting, policy=policy)
    return ADMITTED


def _run_file(case: HostileCase, limits: FileLimits) -> str:
    with tempfile.TemporaryDirectory(prefix="hostile-") as folder:
        (Path(folder) / SCENE_ROOT).mkdir()
        for entry in case.setting:
            SCENE_MAKERS[entry.kind](Path(folder), entry)
        root = files.FileRoot(str(Path(folder) / SCENE_ROOT), max_bytes=limits.max_bytes, suffixes=limits.suffixes)
        files.admit_file(root, case.target)
    return ADMITTED


def _in_scene(folder: Path, entry: SceneEntry) -> Path:
    path = folder / entry.name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _make_file(folder: Path, entry: SceneEntry) -> None:
    _in_scene(folder, entry).write_bytes(bytes(entry.size))


SCENE_MAKERS: Final[Mapping[str, Callable[[Path, SceneEntry], None]]] = MappingProxyType({
    "file": _make_file,
    "folder": lambda folder, entry: _in_scene(folder, entry).mkdir(),
    "symlink": lambda folder, entry: os.symlink(entry.to, _in_scene(folder, entry)),
    "hardlink": lambda folder, entry: os.link(folder / entry.to, _in_scene(folder, entry)),
    "fifo": lambda folder, entry: os.mkfifo(_in_scene(folder, entry)),
})


def _run_url(case: HostileCase, policy: urls.UrlPolicy) -> str:
    answers = case.setting
    urls.check_url(case.target, policy, resolver=None if answers is None else answers.__getitem__)
    return ADMITTED


RUNNERS: Final[Mapping[str, Callable[[HostileCase, Any], str]]] = MappingProxyType({
    "bytes": _run_bytes,
    "file": _run_file,
    "url": _run_url,
})
EXPECTABLE: Final = frozenset(art.ARTIFACT_CATALOG) | frozenset(files.FILE_CATALOG) | frozenset(urls.URL_CATALOG)


def run_case(case: HostileCase, fixture: HostileFixture) -> dict[str, Any]:
    try:
        got = RUNNERS[case.check](case, fixture.policies[case.policy][1])
    except (art.ArtifactError, files.FileError, urls.UrlError) as error:
        got = error.code
    except Exception:  # a check that breaks on hostile input is a finding, reported as one
        got = "UNEXPECTED_ERROR"
    return {"id": case.id, "check": case.check, "expect": case.expect, "got": got, "passed": got == case.expect}


def run_fixture(fixture: HostileFixture, *, case_id: str | None = None) -> dict[str, Any]:
    cases = [case for case in fixture.cases if case_id is None or case.id == case_id]
    if not cases:
        raise FixtureError("HOSTILE_CASE_UNKNOWN")
    results = [run_case(case, fixture) for case in cases]
    failed = [result["id"] for result in results if not result["passed"]]
    return {"passed": not failed, "cases": len(results), "refused": sum(r["got"] != ADMITTED for r in results),
            "failed": failed, "results": results}


# ============================================================================================
# 4. The command line
# ============================================================================================


def main(argv: Sequence[str] | None = None) -> int:
    return td.run_cli(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    parser = td.CliParser(prog="hostile.py", description=f"Run a {FIXTURE_FORMAT} fixture through the artifact checks.")
    parser.add_argument("--fixture", required=True, help=f"path of the {FIXTURE_FORMAT} JSON fixture")
    parser.add_argument("--case", help="run only the case with this id")
    arguments = parser.parse_args(argv)
    summary = run_fixture(load_fixture(arguments.fixture), case_id=arguments.case)
    td.emit_json(summary)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
