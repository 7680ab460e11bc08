"""Durable layer of the trusted boundary (see durable/README.md).

This file only makes the folder a package, so that `unittest discover` run from the repository root
(as the mutation tool does) finds durable/test_durable_dispatcher.py. The modules import each other
by file location, not through this package.
"""
