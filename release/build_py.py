"""The wheel's build_py: every module of the layers' folders except the tests and their peers.

setuptools installs every ``*.py`` file of a package's folder, and its package-data settings
exclude data files only, never a module. The layers' folders hold their tests beside their code (the
README's commands run them there), so this step leaves out, by module name:

- ``test_*``: every test suite (durable/test_durable_dispatcher.py, mcp_bridge/test_guard.py, ...);
- ``fault_server``: the MCP test peer that misbehaves on purpose (mcp_bridge/fault_server.py);
- ``checkpoint_cases``: the signature layer's tampered logs for signatures/ci.sh.

It also installs the core, one module in the checkout (tool_dispatcher.py, still run and copied
alone), as the package ``tool_dispatcher``: the module's text as its ``__init__.py``, beside
``py.typed`` and ``__main__.py`` (release/core_main.py, for ``python -m tool_dispatcher``). PEP 561
marks packages only, so this is how type checkers learn that the core's public names are typed; the
import name, the names and the ``tool-dispatcher`` command are the same.

The example server (mcp_bridge/demo_server.py) is installed: the README and examples/own_tools.py
run it. The source distribution keeps everything (MANIFEST.in), so its tests can run from it.
pyproject.toml names this class under [tool.setuptools.cmdclass]; release/ci.sh checks the wheel's
file list.
"""
from __future__ import annotations

import fnmatch
import os
from typing import Any, Final

from setuptools.command.build_py import build_py

NOT_INSTALLED: Final = ("test_*", "fault_server", "checkpoint_cases")
CORE: Final = "tool_dispatcher"
CORE_MAIN: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core_main.py")


def installed(module: str) -> bool:
    """Whether a layer's module goes into the wheel."""
    return not any(fnmatch.fnmatchcase(module, pattern) for pattern in NOT_INSTALLED)


class BuildPy(build_py):
    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        return [entry for entry in super().find_package_modules(package, package_dir) if installed(entry[1])]

    def build_module(self, module: str, module_file: str, package: Any) -> Any:
        if package or module != CORE:
            return super().build_module(module, module_file, package)
        package_dir = os.path.join(self.build_lib, CORE)
        self.mkpath(package_dir)
        self.copy_file(CORE_MAIN, os.path.join(package_dir, "__main__.py"), preserve_mode=False)
        with open(os.path.join(package_dir, "py.typed"), "w", encoding="ascii"):
            pass  # PEP 561's marker: an empty file
        return super().build_module("__init__", module_file, CORE)
