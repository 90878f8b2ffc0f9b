"""Featurisers: exact feature dicts for hand-written texts and events, River parity on SMS."""

from __future__ import annotations

import json
import math

import pytest

from stream_nb.features import CategoricalFeaturizer, EventFeaturizer, TextFeaturizer
from stream_nb.features import text as text_module
from stream_nb.native import native_allowed

from corpora import load_sms_spam

# ------------------------------------------------------------------------------------------
# TextFeaturizer: default configuration


def test_default_counts_lowercased_words_of_two_or_more_characters():
    assert TextFeaturizer()("Free free FREE prize, a b to-day!") == {
        "free": 3,
        "prize": 1,
        "to": 1,
        "day": 1,
    }


def test_empty_and_tokenless_texts_give_empty_dict():
    featurizer = TextFeaturizer()
    assert featurizer("") == {}
    assert featurizer("a ! ? . 1") == {}
    assert featurizer.transform_many([]) == []


def test_transform_many_equals_transform_one_in_order():
    texts = ["one two two", "", "three"]
    featurizer = TextFeaturizer()
    assert featurizer.transform_many(texts) == [
        {"one": 1, "two": 2},
        {},
        {"three": 1},
    ]
    assert featurizer.transform_many(iter(texts)) == [featurizer.transform_one(t) for t in texts]


def test_lowercase_false_keeps_case():
    assert TextFeaturizer(lowercase=False)("Free free") == {"Free": 1, "free": 1}


def test_strip_accents_removes_combining_marks_before_lowercasing():
    assert TextFeaturizer(strip_accents=True)("Café NAÏVE İstanbul façade") == {
        "cafe": 1,
        "naive": 1,
        "istanbul": 1,
        "facade": 1,
    }
    assert TextFeaturizer()("Café") == {"café": 1}


def test_custom_token_pattern_with_one_group_uses_the_group():
    featurizer = TextFeaturizer(token_pattern=r"#(\w+)")
    assert featurizer("#Win a #prize #win") == {"win": 2, "prize": 1}


def test_word_bigrams_are_joined_with_one_space():
    assert TextFeaturizer(ngram_range=(1, 2))("Free prize, free prize now") == {
        "free": 2,
        "prize": 2,
        "now": 1,
        "free prize": 2,
        "prize free": 1,
        "prize now": 1,
    }


def test_only_trigrams_when_range_is_three_to_three():
    assert TextFeaturizer(ngram_range=(3, 3))("aa bb cc dd") == {"aa bb cc": 1, "bb cc dd": 1}
    assert TextFeaturizer(ngram_range=(3, 3))("aa bb") == {}


def test_stop_words_are_dropped_before_ngrams_are_formed():
    featurizer = TextFeaturizer(ngram_range=(1, 2), stop_words=["the", "of"])
    assert featurizer("The smell of the napalm") == {
        "smell": 1,
        "napalm": 1,
        "smell napalm": 1,
    }


def test_char_ngrams_of_padded_words_are_prefixed_and_added_to_words():
    assert TextFeaturizer(char_ngrams=(3, 3))("go free") == {
        "go": 1,
        "free": 1,
        "#c: go": 1,
        "#c:go ": 1,
        "#c: fr": 1,
        "#c:fre": 1,
        "#c:ree": 1,
        "#c:ee ": 1,
    }


def test_char_ngrams_range_and_short_word_yields_padded_word_once():
    assert TextFeaturizer(char_ngrams=(4, 5))("ab") == {"ab": 1, "#c: ab ": 1}
    assert TextFeaturizer(char_ngrams=(2, 3), token_pattern=r"\w+")("a") == {
        "a": 1,
        "#c: a": 1,
        "#c:a ": 1,
        "#c: a ": 1,
    }


def test_char_ngrams_match_scikit_learn_char_wb_on_space_separated_words():
    feature_extraction = pytest.importorskip("sklearn.feature_extraction.text")
    text = "free prize now go win a cash award"
    analyzer = feature_extraction.CountVectorizer(
        analyzer="char_wb", ngram_range=(2, 4)
    ).build_analyzer()
    expected: dict[str, int] = {}
    for gram in analyzer(text):
        expected["#c:" + gram] = expected.get("#c:" + gram, 0) + 1
    featurizer = TextFeaturizer(char_ngrams=(2, 4), token_pattern=r"\w+")
    ours = {k: v for k, v in featurizer(text).items() if k.startswith("#c:")}
    assert ours == expected


def test_char_ngrams_skip_placeholders_and_stop_words():
    featurizer = TextFeaturizer(char_ngrams=(3, 3), stop_words=["to"])
    assert featurizer("to me at@x.org") == {"me": 1, "#c: me": 1, "#c:me ": 1, "#email": 1}


def test_urls_become_placeholder_plus_domain_feature():
    text = "WIN now: visit HTTP://www.Prize-Site.com/claim?id=7. Or www.other.co.uk, ok"
    assert TextFeaturizer()(text) == {
        "win": 1,
        "now": 1,
        "visit": 1,
        "#url": 2,
        "#url:prize-site.com": 1,
        "or": 1,
        "#url:other.co.uk": 1,
        "ok": 1,
    }


def test_url_domain_drops_userinfo_and_port():
    assert TextFeaturizer()("https://user:pw@Example.ORG:8080/x") == {
        "#url": 1,
        "#url:example.org": 1,
    }


def test_url_domains_can_be_turned_off():
    assert TextFeaturizer(url_domains=False)("see http://a.com and http://b.com") == {
        "see": 1,
        "#url": 2,
        "and": 1,
    }


def test_urls_are_tokenised_as_words_when_normalisation_is_off():
    assert TextFeaturizer(normalize_urls=False)("see http://a.com") == {
        "see": 1,
        "http": 1,
        "com": 1,
    }


def test_urls_are_found_when_text_is_not_lowercased():
    assert TextFeaturizer(lowercase=False)("Go WWW.Win.com Now") == {
        "Go": 1,
        "#url": 1,
        "#url:win.com": 1,
        "Now": 1,
    }


def test_emails_become_placeholder():
    assert TextFeaturizer()("Mail John.Doe+spam@mail.example.com or me@x.io!") == {
        "mail": 1,
        "#email": 2,
        "or": 1,
    }
    assert TextFeaturizer(normalize_emails=False)("me@x.io") == {"me": 1, "io": 1}


def test_at_sign_without_address_is_not_an_email():
    assert TextFeaturizer()("meet @ 5 or @home") == {"meet": 1, "or": 1, "home": 1}


def test_numbers_become_placeholder_only_when_asked():
    text = "Call 08712460324 at 10:30 for £1,000 or 2.5x, 2nd try"
    assert TextFeaturizer(normalize_numbers=True)(text) == {
        "call": 1,
        "#num": 4,
        "at": 1,
        "for": 1,
        "or": 1,
        "2nd": 1,
        "try": 1,
        "5x": 1,
    }
    assert TextFeaturizer()(text)["08712460324"] == 1


def test_placeholders_survive_lowercasing_and_token_pattern_in_ngrams():
    featurizer = TextFeaturizer(ngram_range=(2, 2), normalize_numbers=True)
    assert featurizer("Text WIN to 87121 now") == {
        "text win": 1,
        "win to": 1,
        "to #num": 1,
        "#num now": 1,
    }


def test_max_tokens_keeps_the_first_tokens_only():
    assert TextFeaturizer(max_tokens=3)("aa bb aa cc dd aa") == {"aa": 2, "bb": 1}
    featurizer = TextFeaturizer(max_tokens=2, ngram_range=(1, 2))
    assert featurizer("see www.x.com then more words") == {
        "see": 1,
        "#url": 1,
        "see #url": 1,
        "#url:x.com": 1,
    }


def test_max_tokens_counts_stop_words_and_placeholders():
    featurizer = TextFeaturizer(max_tokens=3, stop_words=["the"])
    assert featurizer("the cat sat on the mat") == {"cat": 1, "sat": 1}
    assert TextFeaturizer(max_tokens=1)("http://a.com b c dd") == {"#url": 1, "#url:a.com": 1}


def test_max_tokens_bounds_a_huge_message():
    huge = "spam " * 1_000_000
    assert TextFeaturizer(max_tokens=5, ngram_range=(1, 2))(huge) == {"spam": 5, "spam spam": 4}


def test_binary_clips_counts_to_one():
    assert TextFeaturizer(binary=True)("win win WIN cash") == {"win": 1, "cash": 1}
    featurizer = TextFeaturizer(binary=True, ngram_range=(1, 2))
    assert featurizer("aa aa aa") == {"aa": 1, "aa aa": 1}


ODD_UNICODE = [
    ("emoji 😀👍🏽 fire🔥", {"emoji": 1, "fire": 1}),
    ("中文文本 and 日本語", {"中文文本": 1, "and": 1, "日本語": 1}),
    ("שלום עולם مرحبا", {"שלום": 1, "עולם": 1, "مرحبا": 1}),
    ("nul\x00byte and\x07bell\x1b[0m", {"nul": 1, "byte": 1, "and": 1, "bell": 1, "0m": 1}),
    ("lone \ud800 surrogate \udfff", {"lone": 1, "surrogate": 1}),
    ("zero\u200bwidth\ufeffbom", {"zero": 1, "width": 1, "bom": 1}),
    ("rtl \u202eevil\u202c mark", {"rtl": 1, "evil": 1, "mark": 1}),
    ("ﬁne ligature", {"ﬁne": 1, "ligature": 1}),
    ("Straße ΣΊΣΥΦΟΣ", {"straße": 1, "σίσυφος": 1}),
    ("\n\t\r\x0b\x0c\u2028\u2029", {}),
    ("combining e\u0301 only", {"combining": 1, "only": 1}),
]


@pytest.mark.parametrize(("text", "expected"), ODD_UNICODE)
def test_odd_unicode_gives_expected_tokens(text, expected):
    assert TextFeaturizer()(text) == expected


@pytest.mark.parametrize(("text", "_expected"), ODD_UNICODE)
def test_odd_unicode_does_not_crash_in_any_configuration(text, _expected):
    configurations = [
        TextFeaturizer.river_compatible(),
        TextFeaturizer(
            strip_accents=True,
            ngram_range=(1, 3),
            char_ngrams=(1, 4),
            stop_words=["and"],
            normalize_numbers=True,
            max_tokens=4,
            binary=True,
        ),
    ]
    for featurizer in configurations:
        features = featurizer(text)
        assert all(isinstance(k, str) and isinstance(v, int) and v >= 1 for k, v in features.items())


def test_strip_accents_folds_compatibility_characters_like_river():
    assert TextFeaturizer(strip_accents=True)("ﬁne ² e\u0301t\u00e9") == {"fine": 1, "ete": 1}


@pytest.mark.parametrize("value", [None, b"bytes", 42, ["list"]])
def test_non_string_input_raises_type_error(value):
    with pytest.raises(TypeError, match="expects a str"):
        TextFeaturizer()(value)
    with pytest.raises(TypeError, match="expects a str"):
        TextFeaturizer().transform_many(["ok", value])


# ------------------------------------------------------------------------------------------
# River parity and configuration


def test_river_compatible_equals_river_bag_of_words_on_every_sms_message():
    from river.feature_extraction import BagOfWords

    river_bag = BagOfWords()
    ours = TextFeaturizer.river_compatible()
    texts = [text for _, text in load_sms_spam()]
    assert len(texts) == 5574
    mismatches = [t for t in texts if ours.transform_one(t) != river_bag.transform_one(t)]
    assert mismatches == []
    assert ours.transform_many(texts) == [river_bag.transform_one(t) for t in texts]


def test_river_compatible_configuration_is_the_documented_one():
    assert TextFeaturizer.river_compatible() == TextFeaturizer(
        token_pattern=r"(?u)\b\w[\w\-]+\b",
        strip_accents=True,
        normalize_urls=False,
        normalize_emails=False,
    )


def test_river_compatible_keeps_hyphenated_tokens():
    assert TextFeaturizer.river_compatible()("To-day: e-mail ME") == {
        "to-day": 1,
        "e-mail": 1,
        "me": 1,
    }


CONFIGURATIONS = [
    {},
    {"lowercase": False, "strip_accents": True, "token_pattern": r"\S+"},
    {
        "ngram_range": (1, 3),
        "char_ngrams": (2, 5),
        "stop_words": ["the", "a", "to"],
        "normalize_urls": False,
        "normalize_numbers": True,
        "url_domains": False,
        "max_tokens": 30,
        "binary": True,
    },
]


@pytest.mark.parametrize("options", CONFIGURATIONS)
def test_config_round_trip_through_json_gives_identical_features(options):
    original = TextFeaturizer(**options)
    config = json.loads(json.dumps(original.to_config()))
    rebuilt = TextFeaturizer.from_config(config)
    assert rebuilt == original
    assert rebuilt.to_config() == original.to_config()
    texts = [text for _, text in load_sms_spam()[:500]]
    assert rebuilt.transform_many(texts) == original.transform_many(texts)


def test_to_config_lists_every_option_with_defaults():
    assert TextFeaturizer().to_config() == {
        "lowercase": True,
        "strip_accents": False,
        "token_pattern": r"(?u)\b\w\w+\b",
        "ngram_range": [1, 1],
        "char_ngrams": None,
        "stop_words": None,
        "normalize_urls": True,
        "normalize_emails": True,
        "normalize_numbers": False,
        "url_domains": True,
        "max_tokens": None,
        "binary": False,
    }


def test_from_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown TextFeaturizer config keys: \\['colour'\\]"):
        TextFeaturizer.from_config({"colour": "blue"})


def test_default_pattern_fast_path_matches_the_pattern_as_written():
    # The default pattern is run as an equivalent faster regex; the written one must agree.
    written = TextFeaturizer(token_pattern=r"(?u)\b\w\w+\b(?#as written)")
    default = TextFeaturizer()
    texts = [text for _, text in load_sms_spam()] + [t for t, _ in ODD_UNICODE]
    assert default.transform_many(texts) == written.transform_many(texts)


def test_river_pattern_fast_path_matches_the_pattern_as_written():
    import random
    import re

    written = TextFeaturizer(token_pattern=r"(?u)\b\w[\w\-]+\b(?#as written)")
    fast = TextFeaturizer(token_pattern=r"(?u)\b\w[\w\-]+\b")
    texts = [text for _, text in load_sms_spam()] + [t for t, _ in ODD_UNICODE]
    assert fast.transform_many(texts) == written.transform_many(texts)
    # random strings over the characters that matter: word, hyphen, space, punctuation, marks
    rng = random.Random(7)
    alphabet = "ab_1-- .,'\u00e9\u0301\u00df\u65e5\u03a3\u03c2\u200b"
    as_written, faster = re.compile(r"(?u)\b\w[\w\-]+\b"), re.compile(r"\w[\w\-]+\b")
    for _ in range(50_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert faster.findall(text) == as_written.findall(text), text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lowercase": "yes"}, "lowercase"),
        ({"strip_accents": 1}, "strip_accents"),
        ({"binary": None}, "binary"),
        ({"normalize_urls": "no"}, "normalize_urls"),
        ({"normalize_emails": 0}, "normalize_emails"),
        ({"normalize_numbers": "x"}, "normalize_numbers"),
        ({"url_domains": 2}, "url_domains"),
        ({"token_pattern": "(unclosed"}, "token_pattern"),
        ({"token_pattern": 5}, "token_pattern"),
        ({"token_pattern": r"(\w)(\w)"}, "token_pattern"),
        ({"token_pattern": r"\w*"}, "token_pattern"),
        ({"ngram_range": (0, 1)}, "ngram_range"),
        ({"ngram_range": (2, 1)}, "ngram_range"),
        ({"ngram_range": (1,)}, "ngram_range"),
        ({"ngram_range": (1.0, 2)}, "ngram_range"),
        ({"ngram_range": (True, 2)}, "ngram_range"),
        ({"char_ngrams": (0, 3)}, "char_ngrams"),
        ({"char_ngrams": 3}, "char_ngrams"),
        ({"stop_words": "the"}, "stop_words"),
        ({"stop_words": ["the", 1]}, "stop_words"),
        ({"stop_words": 5}, "stop_words"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, message):
    with pytest.raises(ValueError, match=message):
        TextFeaturizer(**options)


def test_options_are_keyword_only():
    with pytest.raises(TypeError):
        TextFeaturizer(False)  # type: ignore[misc]


# ------------------------------------------------------------------------------------------
# EventFeaturizer


def test_event_with_inferred_kinds_gives_words_indicators_and_floats():
    event = {
        "id": "m1",
        "text": "Win cash",
        "features": {"sender": "shortcode", "hour": 23, "length": 8.5, "roaming": True},
    }
    assert EventFeaturizer()(event) == {
        "win": 1,
        "cash": 1,
        "sender=shortcode": 1,
        "hour": 23.0,
        "length": 8.5,
        "roaming=true": 1,
    }
    assert type(EventFeaturizer()(event)["hour"]) is float


def test_event_with_declared_kinds_uses_only_listed_fields():
    featurizer = EventFeaturizer(categorical=["hour", "sender"], numeric=["length"])
    event = {
        "text": "hi",
        "features": {"sender": "x", "hour": 23.0, "length": 3, "ignored": [1, 2]},
    }
    assert featurizer(event) == {"hi": 1, "hour=23": 1, "sender=x": 1, "length": 3.0}


def test_declared_categorical_only_means_no_numeric_fields():
    featurizer = EventFeaturizer(text=None, categorical=["a"])
    assert featurizer({"features": {"a": 0.25, "b": 7}}) == {"a=0.25": 1}


def test_booleans_are_categories_not_numbers():
    assert EventFeaturizer(text=None)({"features": {"flag": False}}) == {"flag=false": 1}
    with pytest.raises(ValueError, match="'flag'"):
        EventFeaturizer(text=None, numeric=["flag"])({"features": {"flag": True}})


def test_missing_and_null_fields_are_absent():
    featurizer = EventFeaturizer(categorical=["a"], numeric=["n"])
    assert featurizer({"id": "1"}) == {}
    assert featurizer({"text": None, "features": {"a": None, "n": None}}) == {}
    assert featurizer({"features": None}) == {}
    assert EventFeaturizer()({"features": {"a": None}}) == {}


def test_text_none_ignores_text_and_custom_field_names_are_used():
    assert EventFeaturizer(text=None)({"text": "words here"}) == {}
    featurizer = EventFeaturizer(
        text=TextFeaturizer(binary=True), text_field="body", features_field="meta"
    )
    event = {"body": "aa aa", "meta": {"k": "v"}, "text": "ignored", "features": {"z": 1}}
    assert featurizer(event) == {"aa": 1, "k=v": 1}


def test_indicator_adds_to_and_numeric_replaces_same_named_text_token():
    featurizer = EventFeaturizer(
        text=TextFeaturizer(token_pattern=r"\S+"), categorical=["a"], numeric=["price"]
    )
    event = {"text": "a=b price price", "features": {"a": "b", "price": 9}}
    assert featurizer(event) == {"a=b": 2, "price": 9.0}


@pytest.mark.parametrize(
    ("featurizer", "event", "field"),
    [
        (EventFeaturizer(), {"features": {"tags": ["a"]}}, "tags"),
        (EventFeaturizer(), {"features": {"meta": {"a": 1}}}, "meta"),
        (EventFeaturizer(), {"features": {"score": math.nan}}, "score"),
        (EventFeaturizer(), {"features": {"score": math.inf}}, "score"),
        (EventFeaturizer(), {"features": {"big": 10**400}}, "big"),
        (EventFeaturizer(numeric=["n"]), {"features": {"n": "3.5"}}, "n"),
        (EventFeaturizer(numeric=["n"]), {"features": {"n": -math.inf}}, "n"),
        (EventFeaturizer(categorical=["c"]), {"features": {"c": math.nan}}, "c"),
        (EventFeaturizer(categorical=["c"]), {"features": {"c": [1]}}, "c"),
        (EventFeaturizer(), {"text": 42}, "text"),
        (EventFeaturizer(), {"features": ["a", "b"]}, "features"),
    ],
)
def test_wrong_value_types_raise_value_error_naming_the_field(featurizer, event, field):
    with pytest.raises(ValueError, match=f"field '{field}'"):
        featurizer(event)


def test_non_mapping_event_raises_type_error():
    with pytest.raises(TypeError, match="mapping"):
        EventFeaturizer()("just text")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"categorical": "sender"}, "categorical"),
        ({"numeric": [1]}, "numeric"),
        ({"categorical": ["a", "a"]}, "categorical"),
        ({"categorical": ["a"], "numeric": ["a"]}, "both categorical and numeric"),
        ({"text": "default"}, "text"),
        ({"text_field": ""}, "text_field"),
        ({"features_field": 3}, "features_field"),
    ],
)
def test_bad_event_options_raise_value_error(options, message):
    with pytest.raises(ValueError, match=message):
        EventFeaturizer(**options)


@pytest.mark.parametrize(
    "featurizer",
    [
        EventFeaturizer(),
        EventFeaturizer(text=None, categorical=["a"], numeric=["n"], features_field="meta"),
        EventFeaturizer(text=TextFeaturizer(ngram_range=(1, 2), binary=True), numeric=["n"]),
    ],
)
def test_event_config_round_trip_through_json_gives_identical_features(featurizer):
    rebuilt = EventFeaturizer.from_config(json.loads(json.dumps(featurizer.to_config())))
    assert rebuilt == featurizer
    events = [
        {"text": "Free prize now", "features": {"a": "x", "n": 2}, "meta": {"a": 1, "n": 0.5}},
        {"text": "", "features": {"a": True}},
    ]
    assert rebuilt.transform_many(events) == featurizer.transform_many(events)


def test_event_from_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown EventFeaturizer config keys"):
        EventFeaturizer.from_config({"txt": None})


# ------------------------------------------------------------------------------------------
# CategoricalFeaturizer


def test_categorical_featurizer_maps_fields_to_category_strings():
    event = {"features": {"sender": "bank", "hour": 7, "ratio": 2.0, "vip": True, "x": 0.5}}
    assert CategoricalFeaturizer(["sender", "hour", "ratio", "vip", "missing"])(event) == {
        "sender": "bank",
        "hour": "7",
        "ratio": "2",
        "vip": "true",
    }
    assert CategoricalFeaturizer()(event) == {
        "sender": "bank",
        "hour": "7",
        "ratio": "2",
        "vip": "true",
        "x": "0.5",
    }


def test_categorical_featurizer_rejects_unusable_values_naming_the_field():
    with pytest.raises(ValueError, match="field 'ratio'"):
        CategoricalFeaturizer(["ratio"])({"features": {"ratio": math.inf}})
    with pytest.raises(ValueError, match="field 'tags'"):
        CategoricalFeaturizer()({"features": {"tags": ("a",)}})


def test_categorical_config_round_trip_and_bad_fields():
    featurizer = CategoricalFeaturizer(["a", "b"], features_field="meta")
    rebuilt = CategoricalFeaturizer.from_config(json.loads(json.dumps(featurizer.to_config())))
    assert rebuilt == featurizer
    assert rebuilt({"meta": {"a": 1, "b": "z"}}) == {"a": "1", "b": "z"}
    with pytest.raises(ValueError, match="fields"):
        CategoricalFeaturizer("ab")


@pytest.mark.parametrize("pattern", [r"(?u)\b\w\w+\b", r"(?u)\b\w[\w\-]+\b", r"(?u)\b\w+\b|[£$€]"])
def test_ascii_split_fast_path_finds_the_regex_tokens(pattern):
    import random
    import re

    from stream_nb.features.text import _token_finder

    featurizer = TextFeaturizer(token_pattern=pattern)
    fast = _token_finder(featurizer._pattern)
    as_written = re.compile(pattern).findall
    texts = [text.lower() for _, text in load_sms_spam()]
    rng = random.Random(11)
    alphabet = "aB_9-- .,;:!?'\"()[]{}<>/\\|@#$%^&*+=~`\t\n\r\x0b\x0c\x1c\x1f\x00\x7f£€é"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16))) for _ in range(50_000)]
    for text in texts:
        assert fast(text) == as_written(text), repr(text)


def test_subject_features_count_the_subject_line_twice_and_leave_other_texts_alone():
    featurizer = TextFeaturizer(subject_features=True)
    assert featurizer.transform_one("Subject: cheap meds\nbuy cheap") == {
        "#s:cheap": 1, "#s:meds": 1, "cheap": 2, "meds": 1, "buy": 1}
    plain = TextFeaturizer()
    assert featurizer.transform_one("no subject here, cheap") == plain.transform_one("no subject here, cheap")
    assert "subject_features" not in plain.to_config()  # old configurations keep their fingerprints
    assert TextFeaturizer.from_config(featurizer.to_config()) == featurizer


@pytest.mark.parametrize("options", [{}, {"lowercase": False}, {"normalize_urls": False}, {"normalize_emails": False}])
def test_specials_found_from_their_anchors_are_those_of_the_whole_text(options):
    import random

    from stream_nb.features.specials import ANCHORED_FROM as ANCHORED_SPECIALS_FROM

    featurizer = TextFeaturizer(**options)
    rng = random.Random(3)
    pieces = ["http://a.b/c?d=1", "WWW.x.org", "wWw.y.com.", "mail@host.org", "a.b@c-d.e.f", "@", "://", "www.",
              "x@y", "ftp://h", "(see https://q.r/s).", "<u@v.w>", "\u00a0", "\u3000", "\x1c", "\t", "\n", " ", " ",
              "word", "é", "x.", "-", "+", "'", '"']
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(60, 160))) for _ in range(3_000)]
    texts += [text.lower() for text in texts[:1_000]]
    assert all(len(text) >= ANCHORED_SPECIALS_FROM for text in texts[:100])
    found = 0
    for text in texts:
        whole = [(m.start(), m.end(), m.lastgroup) for m in featurizer._specials.definition.finditer(text)]
        assert featurizer._specials.find(text) == whole, repr(text)
        found += len(whole)
    assert found > 10_000


def test_repr_names_the_options_that_differ_from_the_defaults():
    assert repr(TextFeaturizer()) == "TextFeaturizer()"
    spam = TextFeaturizer(subject_features=True, ngram_range=(1, 2), binary=True)
    assert repr(spam) == "TextFeaturizer(ngram_range=[1, 2], binary=True, subject_features=True)"


def test_the_featurizer_drops_into_a_river_pipeline_and_predicts_as_river_does():
    from river import feature_extraction, naive_bayes

    from stream_nb.model import MultinomialNB

    ours = TextFeaturizer.river_compatible() | MultinomialNB(alpha=1.0, unknown="smooth")
    theirs = feature_extraction.BagOfWords() | naive_bayes.MultinomialNB(alpha=1.0)
    rows = load_sms_spam()[:400]
    for label, text in rows[:300]:
        ours.learn_one(text, label)
        theirs.learn_one(text, label)
    for _, text in rows[300:]:
        expected = theirs.predict_proba_one(text)
        got = ours.predict_proba_one(text)
        assert got.keys() == expected.keys()
        assert all(math.isclose(got[c], expected[c], rel_tol=1e-9, abs_tol=1e-12) for c in got), text
        assert ours.predict_one(text) == theirs.predict_one(text)
    assert TextFeaturizer()._supervised is False
    assert TextFeaturizer().learn_one("anything") is None  # stateless: River's transformer protocol


# ------------------------------------------------------------------------------------------
# TextFeaturizer: OSB sparse word pairs


def test_osb_window_adds_each_pair_up_to_the_window_with_its_skip_count():
    featurizer = TextFeaturizer(osb_window=5)
    # tokens a b c d e: distance 2, 3, 4 pairs (1 skipped ... 3 skipped); unigrams as before
    assert featurizer("aa bb cc dd ee") == {
        "aa": 1, "bb": 1, "cc": 1, "dd": 1, "ee": 1,
        "aa <1> cc": 1, "bb <1> dd": 1, "cc <1> ee": 1,
        "aa <2> dd": 1, "bb <2> ee": 1,
        "aa <3> ee": 1,
    }
    # 3 + 2 + 1 pairs above: a text of n tokens gets sum over d = 2..w-1 of (n - d) of them
    assert len(TextFeaturizer(osb_window=5, ngram_range=(1, 2))(" ".join(f"w{i}" for i in range(10)))) == 10 + 9 + 8 + 7 + 6


def test_osb_pairs_repeat_as_counts_and_keep_subject_lines_apart():
    counts = TextFeaturizer(osb_window=3)("xx yy xx yy xx")
    assert counts["xx <1> xx"] == 2 and counts["yy <1> yy"] == 1 and counts["xx"] == 3
    spam = TextFeaturizer(osb_window=3, subject_features=True, binary=True)
    assert spam("Subject: win big cash\nclaim now") == {
        "#s:win": 1, "#s:big": 1, "#s:cash": 1, "#s:win <1> cash": 1,
        "win": 1, "big": 1, "cash": 1, "win <1> cash": 1, "claim": 1, "now": 1}


def test_osb_window_is_checked_kept_in_the_config_only_when_set_and_takes_the_native_path():
    featurizer = TextFeaturizer(osb_window=5, ngram_range=(1, 2), binary=True, subject_features=True,
                                token_pattern=r"(?u)\b\w+\b|[£$€]")
    assert featurizer.to_config()["osb_window"] == 5
    assert TextFeaturizer.from_config(featurizer.to_config()) == featurizer
    assert "osb_window" not in TextFeaturizer().to_config()  # old configurations keep their fingerprints
    # the C featuriser makes the pairs, when it is built and allowed
    assert (featurizer._native_plan is not None) == (text_module._native is not None and native_allowed())
    for bad in (2, 0, -5, True, 4.0, "5"):
        with pytest.raises(ValueError, match="osb_window"):
            TextFeaturizer(osb_window=bad)
