"""The signature layer: Ed25519 checkpoints over the audit chain (audit_signatures.py beside this file).

Installed (``pip install "tool-dispatcher[signatures]"``), this folder is the package
``tool_dispatcher_signatures``: ``tool_dispatcher_signatures.audit_signatures`` (the
``tool-dispatcher-signatures`` command). It imports ``cryptography`` only when it signs or verifies;
without the extra, those commands answer SIGNATURES_UNAVAILABLE. The core never imports it.

In a checkout this file only makes the folder a package; the module is run by path there.
"""
