"""The MCP bridge layer. The code lives in the modules beside this file (importer.py, ...); the
contract language it compiles schemas with is the core's (tool_dispatcher, section 8).

This file only makes the folder a package, so that `python -m unittest discover` run from the
repository root (as the mutation tool does) finds its tests too. The modules import each other by
their plain names (each puts its own folder on sys.path), so one module is never loaded twice.
"""
