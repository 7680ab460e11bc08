"""``python -m tool_dispatcher_artifacts``: the hostile-artifact fixture's command line, the same as
the ``tool-dispatcher-artifacts`` command.

The code is the package's module hostile.py; this file only calls its main(), so that module is
imported once, under its package name, never a second time as __main__. Every failure is the
one shape, {"passed": false, "error": {...}} on stdout with exit 2, as when it runs by path.
"""
from __future__ import annotations

import sys


def _answer_an_interrupt() -> None:
    # Ctrl-C while the command's module still imports (a good part of a second on a cold machine):
    # the CLI's own answer, CLI_INTERRUPTED and exit 130, never a traceback. run_cli takes SIGINT back.
    import os
    import signal
    interrupted = (b'{\n  "passed": false,\n  "error": {\n    "code": "CLI_INTERRUPTED",\n    "message": "The command '
                   b'was interrupted before it finished.",\n    "retryable": false\n  }\n}\n')
    signal.signal(signal.SIGINT, lambda _number, _frame: (os.write(1, interrupted), os._exit(130)))


def run() -> int:
    """The installed command (pyproject's [project.scripts]) and ``python -m``: the module is
    imported only once the interrupt is answered."""
    _answer_an_interrupt()
    from .hostile import main
    return main()


if __name__ == "__main__":
    sys.exit(run())
