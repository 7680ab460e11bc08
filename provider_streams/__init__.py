"""The provider stream layer. The code lives in provider_streams.py beside this file.

This file only makes the folder a package, so that `python -m unittest discover` run from the
repository root (as the mutation tool does) finds test_provider_streams.py too.
"""
