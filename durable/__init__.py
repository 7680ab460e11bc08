"""Durable layer of the trusted boundary (see durable/README.md).

Installed (``pip install tool-dispatcher``), this folder is the package ``tool_dispatcher_durable``:
``tool_dispatcher_durable.durable_dispatcher`` (the ``tool-dispatcher-durable`` command),
``.postgres_store`` (needs the ``postgres`` extra) and ``.bench_durable``; its modules import each
other relatively, and nothing of it is a top-level name.

In a checkout this file only makes the folder a package, so that `unittest discover` run from the
repository root (as the mutation tool does) finds durable/test_durable_dispatcher.py. There the
modules import each other by file location, not through this package.
"""
