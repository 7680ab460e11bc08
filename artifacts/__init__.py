"""The artifacts layer: files, URLs and binary objects a tool returns, seen by the model only as a
reference (artifacts.py; README.md beside it).

In a checkout this file only makes the folder a package, so that `python -m unittest discover` run
from the repository root finds its tests too. There the modules import each other by their plain
names (each puts its own folder on sys.path), so one module is never loaded twice.
"""
