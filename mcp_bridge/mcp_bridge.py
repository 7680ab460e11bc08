"""The MCP bridge's command line, one verb per job; the code lives in the modules beside this file.

    python -B mcp_bridge/mcp_bridge.py import --server-command "python server.py" --out DRAFT.json --report REPORT.json

Verbs: ``import`` (importer.py: a server's tools as a contract draft and a report), ``guard``
(guard.py: an MCP server to a client that runs every call through the boundary). A missing or
unknown verb is CLI_USAGE in the one failure shape (exit 2), like any other bad command line.

This file is only the entry point: a module named like its folder would be shadowed by the
package when the tests are discovered from the repository root.
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

import sys
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Final, Mapping, Sequence

if __package__:  # installed as tool_dispatcher_mcp (the tool-dispatcher-mcp command, python -m tool_dispatcher_mcp)
    from . import guard, importer
else:  # run by path from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import guard  # noqa: E402
    import importer  # noqa: E402  (it puts the repository root on sys.path for tool_dispatcher)
import tool_dispatcher  # noqa: E402

VERBS: Final[Mapping[str, Callable[[Sequence[str]], int]]] = MappingProxyType({"import": importer.main,
                                                                               "guard": guard.main})
USAGE: Final = ("usage: mcp_bridge.py VERB [OPTIONS]\n\n"
                "verbs:\n"
                "  import    list an MCP server's tools and write a tool-contracts-v1 draft and a report\n"
                "  guard     serve MCP to a client and run every tools/call through the boundary first\n\n"
                "'mcp_bridge.py VERB --help' describes a verb's options.\n")


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE.replace("mcp_bridge.py", tool_dispatcher.command_name("mcp_bridge.py")))
        return 0
    verb = VERBS.get(arguments[0]) if arguments else None
    if verb is None:
        return tool_dispatcher.cli_failure(tool_dispatcher.BoundaryError("CLI_USAGE"))
    return verb(arguments[1:])


if __name__ == "__main__":
    sys.exit(main())
