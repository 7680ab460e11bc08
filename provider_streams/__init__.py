"""The provider stream layer. The code lives in provider_streams.py beside this file.

Installed (``pip install tool-dispatcher``), this folder is the package ``tool_dispatcher_streams``:
``tool_dispatcher_streams.provider_streams`` (the ``tool-dispatcher-streams`` command),
``.stream_table`` and the recorded streams in ``fixtures/``.

In a checkout this file only makes the folder a package, so that `python -m unittest discover` run
from the repository root (as the mutation tool does) finds test_provider_streams.py too.
"""
