"""``python -m tool_dispatcher`` for the installed core (the wheel's tool_dispatcher/__main__.py).

In a checkout the core is the one module tool_dispatcher.py, run by path; installed, release/build_py.py
makes it a package so that it can carry py.typed, and this file runs its main() like the
``tool-dispatcher`` command: the one failure shape, exit 2, as when the module runs by path.
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
    from tool_dispatcher import main
    return main()


if __name__ == "__main__":
    sys.exit(run())
