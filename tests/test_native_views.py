"""_native.featurize_views, the one reading of a batch's texts for several feature views: its
arguments are checked (TypeError, ValueError). Each view's names against the view alone, on
generated inputs, are in test_native_properties.py; `make sanitize` runs this file too."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_nb.config import load_config
from stream_nb.features import text as text_module
from stream_nb.features.text import TextFeaturizer

from native import require_extension

REPO = Path(__file__).resolve().parents[1]
MAIL_TOML = REPO / "configs" / "mail.toml"


def mail_views() -> list[TextFeaturizer]:
    """configs/mail.toml's three views' text featurisers: words and bigrams, words and character
    4-grams, words alone."""
    require_extension(text_module._native, "stream_nb.features._native")
    config = load_config(MAIL_TOML, [])
    featurizers = [config.build_featurizer()] + [config.build_featurizer(view) for view in config.views]
    assert len(featurizers) == 3 and all(featurizer._native_plan is not None for featurizer in featurizers)
    return featurizers


def test_featurize_views_refuses_bad_arguments_with_type_and_value_errors():
    featurizers = mail_views()
    views = [(f._native_plan, f._native_spans, f._feature_list, None, True, None, None) for f in featurizers]
    featurize_views = text_module._native.featurize_views
    capped = TextFeaturizer.from_config({**featurizers[0].to_config(), "max_tokens": 3})
    index = text_module._native.NameIndex()
    bad = [
        ((("a",), views), TypeError, "list"),
        ((["a"], tuple(views)), TypeError, "list"),
        ((["a"], []), ValueError, "at least one view"),
        ((["a"], [list(views[0])]), TypeError, "a view must be a tuple"),
        ((["a"], [views[0][:6]]), TypeError, "7 arguments"),
        ((["a"], [("plan",) + views[0][1:]]), TypeError, "a plan must be a tuple"),
        ((["a"], [(views[0][0][:5],) + views[0][1:]]), TypeError, "12 arguments"),
        ((["a"], [(b"x" * 9,) + views[0][1:]]), TypeError, "a plan must be a tuple"),
        ((["a"], [views[0], (capped._native_plan,) + views[0][1:]]), ValueError, "reads tokens unlike"),
        ((["a"], [views[0][:3] + ([],) + views[0][4:]]), TypeError, "column_of must be a dict"),
        ((["a"], [views[0][:3] + ({}, True, index, None)]), TypeError, "index must be a NameIndex"),
        ((["a"], [views[0][:3] + ({}, True, "index", [])]), TypeError, "index must be a NameIndex"),
        ((["a"], views, [[]] * 2), TypeError, "extra must be None"),
        ((["a"], views, [["#x", 3]]), TypeError, "an extra name must be a str"),
        (([b"a"], views), TypeError, "expects a str, got bytes"),
    ]
    for args, error, message in bad:
        with pytest.raises(error, match=message):
            featurize_views(*args)
    # a fallback is called only for a str subclass: one that is not callable is then a TypeError
    assert len(featurize_views(["a"], [views[0][:2] + (None,) + views[0][3:]] * 2)) == 2
    with pytest.raises(TypeError):
        featurize_views([type("Text", (str,), {})("a")], [views[0][:2] + (None,) + views[0][3:]])
    # the index given to a view that failed is free again
    assert featurize_views(["a b"], [views[0][:3] + ({}, True, index, [])])[0][0] is None
