"""The artifacts layer: files, URLs and binary objects a tool returns, seen by the model only as a
reference (artifacts.py), and images and PDFs sent to a provider in a tool result (multimodal.py);
README.md beside them.

In a checkout this file only makes the folder a package, so that `python -m unittest discover` run
from the repository root finds its tests too. There the tests load the modules as this package's
(artifacts.artifacts, artifacts.multimodal), and multimodal imports its sibling relatively. Run by
path or discovered with `-s artifacts`, the modules import each other by their plain names, this
folder ahead of the repository root on sys.path (where the name artifacts is this folder read as a
package). Either way one module is never loaded twice.
"""
