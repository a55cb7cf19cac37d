"""The package's front door: `specviz.__all__` names exactly the lazily loaded exports, and each resolves."""

from __future__ import annotations

import specviz


def test_all_lists_exactly_the_lazy_exports_and_each_resolves():
    assert specviz.__all__ == sorted(specviz._EXPORTS)
    for name in specviz.__all__:
        assert getattr(specviz, name).__name__ == name
