"""The optional C extensions in tests: a test of one needs it built.

Where it is not built the test skips, with the reason; under CI (``CI=true``), where
`pip install -e .` builds every extension with the machine's compiler, it fails instead.
"""

from __future__ import annotations

import os

import pytest


def require_extension(module, name: str) -> None:
    """Skip (fail under CI) unless `module`, the import of extension `name`, is there."""
    if module is not None:
        return
    reason = f"the C extension {name} is not built (pip install -e . builds it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)
