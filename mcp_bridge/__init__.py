"""The MCP bridge layer. The code lives in the modules beside this file (importer.py, ...); the
contract language it compiles schemas with is the core's (tool_dispatcher, section 8).

Installed (``pip install tool-dispatcher``), this folder is the package ``tool_dispatcher_mcp``:
``tool_dispatcher_mcp.mcp_bridge`` (the ``tool-dispatcher-mcp`` command, verbs ``import`` and
``guard``), ``.importer``, ``.client``, ``.forward``, ``.guard``, ``.census`` and the example server
``.demo_server``; the modules import each other relatively (``from . import client``), so no plain
name such as ``client`` becomes importable. The tests and the fault server are not installed.

In a checkout this file only makes the folder a package, so that `python -m unittest discover` run
from the repository root (as the mutation tool does) finds its tests too. There the modules import
each other by their plain names (each puts its own folder on sys.path), so one module is never
loaded twice.
"""
