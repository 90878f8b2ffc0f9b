#!/usr/bin/env python
"""Mail quality: stream_nb against bogofilter, crm114 and Vowpal Wabbit on every corpus, in one run.

Every system reads the same bytes of each message, scores it with what it has learned from the
messages before it, then learns it (prequential), from an empty database at the start of each
stream; each is scored by its own scores.

Streams (from ../shared/data; read in place, never copied into the repository)
  sms           SMS Spam Collection (5,574), file order; each SMS as a header-less message:
                an empty header block ("\\n") then the text
  enron         Enron-Spam 1-6 (33,715), arrival order, one mailbox after another, one database
                for the whole stream; each file as a message: its "Subject: ..." line, an empty
                line, the rest of the file (the preprocessed corpus has no other header)
  spamassassin  SpamAssassin 2003 (2,796), raw mail as delivered, in one fixed shuffle:
                members sorted by name, then random.Random(SHUFFLE_SEED = 23).shuffle

Systems
  bogofilter    Debian's bogofilter 1.2.5 (`apt-get install bogofilter`), its defaults
                (Robinson f(w), Fisher chi-square, robs 0.0178, robx 0.52, min_dev 0.375): each
                message classified (`-TT`: the spamicity, 16 digits, is the score), then
                registered with its true label (`-s`/`-n`: train on everything). Two processes
                a message, from one shell loop; an empty database (the first message) is 0.5.
  crm114        Debian's crm114 20100106 (`apt-get install crm114`), as its mailfilter ships
                (/usr/share/crm114/mailfilter.cf): classifier `osb unique microgroom`, tokens
                /[[:graph:]]+/, the first 16,000 bytes (decision_length), thick-threshold
                training at 5.0 (learn a spam whose pR < 5, a ham whose pR > -5; pR > 0 is
                spam, so errors are always learned). Score = pR. One crm process reads the
                whole stream (a loop in CRM114's language, below), so no start-up per message.
  vw-words      Vowpal Wabbit 9.11.9 (`pip install vowpalwabbit`, its Python API in this
                process; not a dependency of the project), the online-learning anchor:
                `--quiet -b 22 --loss_function logistic`, one pass. Features: the message's
                bytes decoded (utf-8, errors replaced), lower-cased, its distinct tokens of
                configs/mail.toml's token_pattern ((?u)\\b\\w+\\b and the signs £$€), binary and
                scaled to unit length (each value 1/sqrt(n distinct); VW adds its constant).
                Each message predicted, then learned with label +1 spam / -1 ham; the score is
                the prediction, the linear margin (no link; VW clips it to +-50 for logistic
                loss, reached by none here); an empty model scores 0.
  vw-char4      the same with `-l 1`, over the distinct byte 4-grams of the first 3,000 bytes
                (VW_CHAR_BYTES), binary, unit length.
  spam.toml     configs/spam.toml through the library's replay path (replay_and_report, the
                code `stream-nb replay` runs), each message a mail event (SpamAssassin's read
                by stream_nb.mail.sources from the tarball, labeled by folder; SMS and Enron
                made of the bytes the peers read): stream_nb.features.mail reads it (the text
                "Subject: <subject>\\n<body>" through the configured featuriser, plus the
                parser's '#' evidence features, count 1); the score is the replay recorder's
                (scores.csv's), log P(spam|x) - log P(ham|x) before learning; the [training]
                regime decides what is learned
  mail.toml     configs/mail.toml the same way, with its [evaluation] score_scale set to
                "none": the plain log-odds (its thick threshold is on log-odds per
                sqrt(distinct features): training.margin_scale)
  mail.toml/sqrt  configs/mail.toml as shipped: scored by log-odds / sqrt(n distinct
                features), its score_scale (stream_nb.model.scale)
  --variant     NAME=KEY=VALUE;KEY=VALUE: configs/mail.toml with overrides (research), plus
                the pseudo-keys mail.evidence=false (no parser evidence features: each message
                replayed as the text event of its subject and body),
                mail.score=log_odds|per_sqrt_feature|per_feature (the log-odds, over sqrt(n)
                or over n; the default: the configuration's score_scale),
                mail.config=spam.toml (start from spam.toml) and mail.scorer=robinson (the same
                features combined by Robinson's f(w) and Fisher's chi-square, bogofilter's
                constants, training on everything; see robinson_fisher_scores)

An event scored before both classes are learned scores the neutral point (stream_nb: 0, as
bogofilter's empty database gives 0.5), where replay records +-inf (one class) or nothing.

Measures, per stream and system: accuracy (spam when the score is above the neutral point:
0.5, pR 0, log-odds 0, VW's margin 0), 1-ROCA% = 100 (1 - AUC) (ties 0.5) and sm% at hm% 0.1%
(spam missed at the best threshold letting at most 0.1% of ham through), both from
stream_nb.replay.evaluation, and the rate (msg/s: scoring and learning, VW's feature
extraction in Python included; the peers' processes run beside stream_nb's systems, on 2
cores). Targets of issue 23, for each stream and each stream_nb system, against the peers run
(bogofilter, crm114, vw-words, vw-char4): 1-ROCA% at most half the best peer's; sm% at hm%
0.1% no worse than any peer's; accuracy >= 99% on raw mail (spamassassin). PASS/FAIL printed;
exit status 0 when the run completes, 2 if a corpus or bogofilter or crm114 is missing
(nothing runs), or if vowpalwabbit is missing (the other systems run without VW's).

    .venv/bin/python benchmarks/mail_quality.py             # everything (~20 minutes, 2 cores)
    .venv/bin/python benchmarks/mail_quality.py --quick     # SMS, enron1, SpamAssassin
    .venv/bin/python benchmarks/mail_quality.py --corpus spamassassin --systems mail.toml \\
        --variant alpha1=model.alpha=1.0 --variant noev=mail.evidence=false
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import platform
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stream_nb.config import load_config  # noqa: E402
from stream_nb.features.mail import mail_text  # noqa: E402
from stream_nb.mail.parse import ParsedMail, parse_mail  # noqa: E402
from stream_nb.mail.sources import parse_label_folders, read_mail  # noqa: E402
from stream_nb.replay.cli import replay_and_report  # noqa: E402
from stream_nb.replay.corpora import ENRON_SUBSETS, sms_spam  # noqa: E402
from stream_nb.replay.evaluation import miss_rate_at_false_positive_rate, roc_auc  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
SMS_PATH = SHARED / "sms_spam_collection" / "SMSSpamCollection"
ENRON_PATH = SHARED / "enron_spam.tar.gz"
SPAMASSASSIN_PATH = SHARED / "spamassassin_2003.tar.gz"
CONFIGS = {"spam.toml": REPO / "configs" / "spam.toml", "mail.toml": REPO / "configs" / "mail.toml"}
SHUFFLE_SEED = 23  # the number; any fixed seed, documented, so every run sees one order
PEERS = ("bogofilter", "crm114")
VW_SYSTEMS = ("vw-words", "vw-char4")
CORPORA = ("sms", "enron", "spamassassin")
RAW_MAIL = ("spamassassin",)
SPAMASSASSIN_FOLDERS = ("spam=spam-2", "ham=easy-ham-2")  # replay --label-folder
REPLAY_BATCH = 1000  # replay's --batch-size default (results do not depend on it)


@dataclass(frozen=True)
class Message:
    id: str
    label: str  # "ham" or "spam"
    data: bytes  # what every system reads


# ---- streams ---------------------------------------------------------------------------------

def sms_messages(path: Path = SMS_PATH) -> list[Message]:
    """The SMS Spam Collection in file order, each text after an empty header block."""
    return [Message(e["id"], e["label"], b"\n" + e["text"].encode("utf-8")) for e in sms_spam(path)]


_ENRON_MEMBER = re.compile(r"(?:.*/)?(enron\d)/(ham|spam)/((\d+)\.[^/]*\.(ham|spam)\.txt)$")


def enron_messages(path: Path = ENRON_PATH, subsets=ENRON_SUBSETS) -> list[Message]:
    """Enron-Spam's exact bytes, each subset in arrival order (NNNN), subsets in turn; the
    first line (the subject) becomes the header, an empty line separating it from the body."""
    found: dict[str, list] = {subset: [] for subset in subsets}
    with tarfile.open(path) as archive:
        for member in archive:
            match = _ENRON_MEMBER.match(member.name)
            if member.isfile() and match and match[1] in found:
                found[match[1]].append((int(match[4]), match[3], match[2], archive.extractfile(member).read()))
    messages = []
    for subset in subsets:
        for _, name, label, data in sorted(found[subset]):
            first, newline, rest = data.partition(b"\n")
            messages.append(Message(f"{subset}/{name}", label, first + b"\n\n" + rest if newline else first + b"\n\n"))
    return messages


def spamassassin_messages(path: Path = SPAMASSASSIN_PATH, seed: int = SHUFFLE_SEED) -> list[Message]:
    """SpamAssassin 2003's raw messages (label = folder), sorted by name, then one shuffle."""
    messages = []
    with tarfile.open(path) as archive:
        for member in archive:
            if member.isfile() and member.name.endswith(".txt"):
                folder = member.name.split("/")[1]
                label = "spam" if folder.startswith("spam") else "ham"
                messages.append(Message(member.name, label, archive.extractfile(member).read()))
    messages.sort(key=lambda m: m.id)
    random.Random(seed).shuffle(messages)
    return messages


def load_stream(corpus: str, quick: bool, seed: int = SHUFFLE_SEED) -> list[Message]:
    if corpus == "sms":
        return sms_messages()
    if corpus == "enron":
        return enron_messages(subsets=ENRON_SUBSETS[:1] if quick else ENRON_SUBSETS)
    return spamassassin_messages(seed=seed)


# ---- peers -----------------------------------------------------------------------------------

BOGOFILTER_LOOP = r"""
while read -r path flag; do
    score=$(bogofilter -d db -TT -I "$path" 2>/dev/null)
    echo "${score:-0.5}"
    bogofilter -d db "-$flag" -I "$path"
done < list
"""

# One crm process for the whole stream: read "label path" lines, classify the file (pR > 0:
# spam.css wins), print pR, learn it as mailfilter's thick threshold says.
CRM_LOOP = r"""
window
{
    isolate (:line:) //
    isolate (:msg:) //
    isolate (:stats:) //
    isolate (:pr:) /0/
    isolate (:lab:) //
    isolate (:path:) //
    {
        input <byline> (:line:)
        match [:line:] (:: :lab: :path:) /^([a-z]+) ([^\n]+)/
        input (:msg:) [:*:path:]
        isolate (:stats:) //
        {
            classify <osb unique microgroom> (spam.css | ham.css) (:stats:) [:msg:] /[[:graph:]]+/
        }
        match [:stats:] (:: :pr:) /pR: *([-.0-9e+]+)/
        output /:*:pr:\n/
        {
            match [:lab:] /spam/
            eval /:@: :*:pr: < THICK :/
            learn <osb unique microgroom> (spam.css) [:msg:] /[[:graph:]]+/
        }
        {
            match [:lab:] /ham/
            eval /:@: :*:pr: > -THICK :/
            learn <osb unique microgroom> (ham.css) [:msg:] /[[:graph:]]+/
        }
        liaf
    }
}
"""
CRM_THICK_THRESHOLD = 5.0  # mailfilter.cf's thick_threshold
CRM_DECISION_LENGTH = 16000  # mailfilter.cf's decision_length: bytes of a message read


def _write_messages(messages: list[Message], folder: Path, limit: int | None = None) -> None:
    folder.mkdir(parents=True)
    for i, message in enumerate(messages):
        (folder / str(i)).write_bytes(message.data if limit is None else message.data[:limit])


def _scores_from(output: str, n: int, system: str) -> np.ndarray:
    scores = np.array([float(line) for line in output.split()], dtype=np.float64)
    if len(scores) != n:
        raise RuntimeError(f"{system} gave {len(scores)} scores for {n} messages")
    return scores


def bogofilter_scores(messages: list[Message], workdir: Path) -> np.ndarray:
    """Spamicity of each message before it is registered with its label."""
    home = workdir / "bogofilter"
    _write_messages(messages, home / "messages")
    (home / "db").mkdir()
    (home / "list").write_text("".join(f"messages/{i} {'s' if m.label == 'spam' else 'n'}\n"
                                       for i, m in enumerate(messages)))
    done = subprocess.run(["bash", "-c", BOGOFILTER_LOOP], cwd=home, capture_output=True, text=True, check=True)
    return _scores_from(done.stdout, len(messages), "bogofilter")


def crm114_scores(messages: list[Message], workdir: Path) -> np.ndarray:
    """pR of each message (log10 odds, spam positive) before thick-threshold training."""
    home = workdir / "crm114"
    _write_messages(messages, home / "messages", CRM_DECISION_LENGTH)
    (home / "list").write_text("".join(f"{m.label} {home / 'messages' / str(i)}\n" for i, m in enumerate(messages)))
    (home / "loop.crm").write_text(CRM_LOOP.replace("THICK", str(CRM_THICK_THRESHOLD)))
    for css in ("spam.css", "ham.css"):  # empty class files, so the first classify has both
        subprocess.run(["crm", "-{learn <osb unique microgroom> (" + css + ") /[[:graph:]]+/}"], cwd=home,
                       stdin=subprocess.DEVNULL, check=True, capture_output=True)
    with open(home / "list", "rb") as listing:
        done = subprocess.run(["crm", "loop.crm"], cwd=home, stdin=listing, capture_output=True, text=True, check=True)
    return _scores_from(done.stdout, len(messages), "crm114")


PEER_RUNNERS = {"bogofilter": bogofilter_scores, "crm114": crm114_scores}


# ---- Vowpal Wabbit ----------------------------------------------------------------------------

VW_ARGUMENTS = {"vw-words": "--quiet -b 22 --loss_function logistic",
                "vw-char4": "--quiet -b 22 --loss_function logistic -l 1"}
VW_WORD = re.compile(r"(?u)\b\w+\b|[£$€]")  # configs/mail.toml's token_pattern
VW_CHAR_BYTES = 3000


def vw_words(data: bytes) -> list[str]:
    """Distinct lower-cased words, first occurrence first (a fixed order: the same sums every
    run). No word holds whitespace, ':' or '|', so each is a VW feature name as it is."""
    return list(dict.fromkeys(VW_WORD.findall(data.decode("utf-8", errors="replace").lower())))


def vw_char4(data: bytes) -> list[str]:
    """Distinct byte 4-grams of the head, in hex: any byte is safe in VW's text format."""
    head = data[:VW_CHAR_BYTES]
    return [gram.hex() for gram in dict.fromkeys(head[i:i + 4] for i in range(len(head) - 3))]


VW_FEATURES = {"vw-words": vw_words, "vw-char4": vw_char4}


def vw_example(label: str, features: list[str]) -> str:
    """VW's text format, binary features at unit length: the namespace's weight 1/sqrt(n)
    multiplies each feature's value 1 (the same model as writing f:1/sqrt(n) for each)."""
    scale = 1.0 / math.sqrt(max(len(features), 1))
    return f"{1 if label == 'spam' else -1} |m:{scale!r} {' '.join(features)}"


def vw_scores(system: str, messages: list[Message]) -> np.ndarray:
    """VW's margin for each message before it is learned (predict, then learn)."""
    import vowpalwabbit  # lazily: a benchmark tool, never a dependency of the project

    workspace = vowpalwabbit.Workspace(VW_ARGUMENTS[system])
    featurize = VW_FEATURES[system]
    scores = np.empty(len(messages))
    for i, message in enumerate(messages):
        example = workspace.parse(vw_example(message.label, featurize(message.data)))
        scores[i] = workspace.predict(example)
        workspace.learn(example)
        workspace.finish_example(example)
    workspace.finish()
    return scores


# ---- stream_nb -------------------------------------------------------------------------------

def mail_events(stream: str, messages: list[Message]) -> list[dict]:
    """The stream as mail events, in the order of `messages`: raw mail (SpamAssassin) as
    stream_nb.mail.sources reads the tarball, labeled by folder (`stream-nb replay --input
    spamassassin_2003.tar.gz --label-folder spam=spam-2 --label-folder ham=easy-ham-2`), the
    others made of the bytes the peers read. Checked: the same ids, bytes and labels."""
    if stream not in RAW_MAIL:
        return [{"id": m.id, "text": None, "features": None, "label": m.label, "mail": m.data} for m in messages]
    # matched by where each message was (an event's id is its Message-ID)
    read = {event["path"]: event for event in read_mail(SPAMASSASSIN_PATH,
                                                        label_folders=parse_label_folders(SPAMASSASSIN_FOLDERS))}
    events = [read[m.id] for m in messages]
    if len(read) != len(messages) or any(e["mail"] != m.data or e["label"] != m.label
                                         for e, m in zip(events, messages)):
        raise RuntimeError("stream_nb.mail.sources read other messages than the benchmark's")
    return events


def text_events(events: list[dict]) -> list[dict]:
    """Each mail event as the text event of its subject and body (no parser evidence features)."""
    return [{"id": e["id"], "text": mail_text(parse_mail(e["mail"])), "features": None, "label": e["label"],
             "mail": None} for e in events]


def stream_nb_scores(events: list[dict], config, workdir: Path, score: str | None = None
                     ) -> tuple[np.ndarray, float]:
    """The score of each event before it is learned, and the share learned, read from the
    library's replay (replay_and_report: the code `stream-nb replay --scores` runs; the
    [training] regime, the forgetting clock and the score as replay has them): the recorder's
    scores on the configuration's [evaluation] score_scale. `score` instead: "log_odds"
    (the recorder's log-odds), "per_sqrt_feature" or "per_feature" (those over sqrt(n) or n).
    An event scored before both classes are learned (no record, or +-inf) scores 0."""
    if score is not None:  # per_feature and log_odds read the sizes the sqrt scale keeps
        config.evaluation["score_scale"] = "none" if score == "log_odds" else "sqrt_features"
    report_dir = Path(tempfile.mkdtemp(prefix="replay_", dir=workdir))
    _, (contender,), _ = replay_and_report(events, [("benchmark", config)], report_dir, batch_size=REPLAY_BATCH)
    recorder = contender.recorder
    if score == "log_odds":
        recorded = recorder.log_odds("spam")
    elif score == "per_feature":
        recorded = recorder.log_odds("spam") / np.maximum(recorder.sizes, 1)
    else:
        recorded = recorder.scores("spam")
    both_known = np.isfinite(recorder.log_scores).all(axis=1) & (recorder.log_scores.shape[1] == 2)
    by_id = dict(zip(contender.scored_ids, np.where(both_known, recorded, 0.0).tolist()))
    scores = np.array([by_id.get(event["id"], 0.0) for event in events], dtype=np.float64)
    return scores, contender.learned / max(len(events), 1)


# Robinson's f(w) with Fisher's chi-square combining, bogofilter's defaults (research lever)
ROBS, ROBX, MIN_DEV = 0.0178, 0.52, 0.375


def _chi2_q(chi: float, degrees: int) -> float:
    """P(X >= chi) for a chi-square variable of even degrees (Fisher's combining)."""
    m = chi / 2.0
    term = total = math.exp(-m)
    for i in range(1, degrees // 2):
        term *= m / i
        total += term
    return min(total, 1.0)


def robinson_fisher_scores(features: list[dict], labels: list[str], learn_margin: float | None = None
                           ) -> tuple[np.ndarray, float]:
    """Spamicity by Robinson and Fisher over per-class document frequencies of the features:

        p(w) = (b/N_spam) / (b/N_spam + g/N_ham),  f(w) = (s x + n p(w)) / (s + n),  n = b + g
        S = 1 - Q(-2 sum ln f, 2k),  H = 1 - Q(-2 sum ln(1 - f), 2k),  I = (1 + S - H) / 2

    over the k features with |f(w) - 0.5| >= min_dev (s = robs, x = robx). Every message learned
    (train on everything) unless `learn_margin`: then only when |I - label| > learn_margin."""
    counts: dict[str, list[int]] = {}
    n_spam = n_ham = 0
    scores = np.full(len(labels), 0.5)
    learned = 0
    for i, (x, label) in enumerate(zip(features, labels)):
        if n_spam and n_ham:
            ln_f = ln_1f = 0.0
            k = 0
            for name in x:
                bg = counts.get(name)
                if bg is None:
                    f = ROBX
                else:
                    b, g = bg
                    bad, good = b / n_spam, g / n_ham
                    n = b + g
                    f = (ROBS * ROBX + n * (bad / (bad + good) if bad + good else ROBX)) / (ROBS + n)
                if abs(f - 0.5) >= MIN_DEV:
                    ln_f += math.log(f)
                    ln_1f += math.log1p(-f)
                    k += 1
            if k:
                spamminess = 1.0 - _chi2_q(-2.0 * ln_1f, 2 * k)
                hamminess = 1.0 - _chi2_q(-2.0 * ln_f, 2 * k)
                scores[i] = (1.0 + spamminess - hamminess) / 2.0
        target = 1.0 if label == "spam" else 0.0
        if learn_margin is not None and abs(scores[i] - target) <= learn_margin:
            continue
        learned += 1
        column = 0 if label == "spam" else 1
        for name in x:
            counts.setdefault(name, [0, 0])[column] += 1
        n_spam += label == "spam"
        n_ham += label == "ham"
    return scores, learned / max(len(labels), 1)


@dataclass
class Candidate:
    """A stream_nb system: a configuration with overrides, the evidence switch, the scorer."""

    name: str
    config_path: Path
    overrides: list[str]
    evidence: bool = True
    scorer: str = "multinomial"
    score: str | None = None  # the configuration's score_scale; or log_odds, per_sqrt_feature, per_feature

    @classmethod
    def parse(cls, spec: str) -> Candidate:
        name, _, rest = spec.partition("=")
        candidate = cls(name, CONFIGS["mail.toml"], [])
        for item in filter(None, rest.split(";")):
            key, _, value = item.partition("=")
            if key == "mail.evidence":
                candidate.evidence = value.lower() == "true"
            elif key == "mail.scorer":
                candidate.scorer = value
            elif key == "mail.score":
                candidate.score = value
            elif key == "mail.config":
                candidate.config_path = CONFIGS[value]
            else:
                candidate.overrides.append(item)
        return candidate


STREAM_NB_SYSTEMS = ("spam.toml", "mail.toml", "mail.toml/sqrt")


def built_in_candidate(system: str) -> Candidate:
    """The shipped configurations scored by their log-odds, and mail.toml as shipped: by its
    log-odds per sqrt(feature) (its score_scale), the scale its thick threshold is on."""
    if system == "mail.toml/sqrt":
        return Candidate(system, CONFIGS["mail.toml"], [])
    return Candidate(system, CONFIGS[system], ['evaluation.score_scale="none"'])


def mail_features(parsed: ParsedMail, featurizer, evidence: bool = True) -> dict:
    """The text's features, plus the parser's evidence features, each counted once (what
    stream_nb.features.mail makes of a message), for the research scorer."""
    features = featurizer.transform_one(mail_text(parsed))
    if evidence:
        for name in parsed.features:
            features.setdefault(name, 1)
    return features


class FeatureCache:
    """Parsed mail per stream, and feature dicts per (stream, featuriser options, evidence), for
    the research scorer (robinson_fisher_scores); stream_nb's systems go through replay."""

    def __init__(self):
        self.parsed: dict[str, list[ParsedMail]] = {}
        self.features: dict[tuple, list[dict]] = {}

    def of(self, stream: str, messages: list[Message], featurizer, evidence: bool) -> list[dict]:
        if stream not in self.parsed:
            self.parsed[stream] = [parse_mail(m.data) for m in messages]
        key = (stream, repr(sorted(featurizer.to_config().items())), evidence)
        if key not in self.features:
            self.features[key] = [mail_features(p, featurizer, evidence) for p in self.parsed[stream]]
        return self.features[key]


def run_candidate(candidate: Candidate, stream: str, messages: list[Message], cache: FeatureCache,
                  events: list[dict], workdir: Path) -> tuple[np.ndarray, float]:
    config = load_config(candidate.config_path, candidate.overrides)
    if candidate.scorer == "robinson":  # bogofilter's regime: train on everything
        features = cache.of(stream, messages, config.build_featurizer(), candidate.evidence)
        return robinson_fisher_scores(features, [m.label for m in messages])
    return stream_nb_scores(events if candidate.evidence else text_events(events), config, workdir, candidate.score)


# ---- measures --------------------------------------------------------------------------------

NEUTRAL = {"bogofilter": 0.5, "crm114": 0.0, "vw-words": 0.0, "vw-char4": 0.0}
NEUTRAL_ROBINSON = 0.5


@dataclass
class Measures:
    accuracy: float
    one_minus_roca: float  # percent
    sm_at_hm: float  # percent
    learned: float | None
    seconds: float

    @classmethod
    def of(cls, scores: np.ndarray, labels: list[str], neutral: float, learned, seconds) -> Measures:
        spam = np.array([label == "spam" for label in labels])
        accuracy = float(np.mean((scores > neutral) == spam))
        auc = roc_auc(scores, spam)
        miss = miss_rate_at_false_positive_rate(scores, spam, 0.001)
        return cls(accuracy, 100 * (1 - auc), 100 * miss, learned, seconds)


def row(stream: str, system: str, n: int, m: Measures) -> str:
    learned = "" if m.learned is None else f"{100 * m.learned:6.1f}"
    return (f"{stream:13s} {system:22s} {n:6d} {100 * m.accuracy:7.2f} {m.one_minus_roca:8.3f} "
            f"{m.sm_at_hm:8.1f} {learned:>6s} {m.seconds:7.1f} {n / max(m.seconds, 1e-9):7.0f}")


HEADER = (f"{'stream':13s} {'system':22s} {'events':>6s} {'acc%':>7s} {'1-ROCA%':>8s} {'sm%@hm.1':>8s} "
          f"{'lrnd%':>6s} {'time_s':>7s} {'msg/s':>7s}")
ANCHORS = (*PEERS, *VW_SYSTEMS)  # what stream_nb's systems are held against


def verdicts(stream: str, results: dict[str, Measures]) -> list[str]:
    """The issue's targets for each stream_nb system against the peers run on this stream."""
    peers = {p: results[p] for p in ANCHORS if p in results}
    lines = []
    for system, m in results.items():
        if system in ANCHORS:
            continue
        checks, ok = [], True
        if peers:
            best_peer = min(peers, key=lambda p: peers[p].one_minus_roca)
            best = peers[best_peer].one_minus_roca
            good = m.one_minus_roca <= best / 2
            ok &= good
            ratio = m.one_minus_roca / best if best else math.inf
            checks.append(f"1-ROCA% {m.one_minus_roca:.3f} {'<=' if good else '>'} half of {best_peer}'s "
                          f"{best:.3f} (ratio {ratio:.2f})")
            fewest_peer = min(peers, key=lambda p: peers[p].sm_at_hm)
            worst_allowed = peers[fewest_peer].sm_at_hm
            good = m.sm_at_hm <= worst_allowed
            ok &= good
            checks.append(f"sm%@hm0.1% {m.sm_at_hm:.1f} {'<=' if good else '>'} {fewest_peer}'s "
                          f"{worst_allowed:.1f}")
        if stream in RAW_MAIL:
            good = m.accuracy >= 0.99
            ok &= good
            checks.append(f"accuracy {100 * m.accuracy:.2f}% {'>=' if good else '<'} 99%")
        lines.append(f"{stream:13s} {system:22s} {'PASS' if ok else 'FAIL'} ({'; '.join(checks)})")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="enron1 only for Enron (SMS and SpamAssassin whole)")
    parser.add_argument("--corpus", action="append", choices=CORPORA, help="one stream (repeatable); default all")
    parser.add_argument("--systems", default=",".join((*ANCHORS, *STREAM_NB_SYSTEMS)),
                        help=f"comma-separated, of {', '.join((*ANCHORS, *STREAM_NB_SYSTEMS))}")
    parser.add_argument("--seed", type=int, default=SHUFFLE_SEED, help="SpamAssassin's shuffle (robustness checks)")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=KEY=VALUE;...: configs/mail.toml with overrides (repeatable)")
    args = parser.parse_args(argv)

    systems = [s for s in args.systems.split(",") if s]
    for system in systems:
        if system not in (*ANCHORS, *STREAM_NB_SYSTEMS):
            parser.error(f"unknown system {system!r}")
    for peer, program in (("bogofilter", "bogofilter"), ("crm114", "crm")):
        if peer in systems and shutil.which(program) is None:
            print(f"{program} not found: apt-get install {peer}", file=sys.stderr)
            return 2
    vw_missing = any(s in VW_SYSTEMS for s in systems) and importlib.util.find_spec("vowpalwabbit") is None
    if vw_missing:  # an anchor, not a dependency: the rest of the comparison still runs
        print("vowpalwabbit not found: pip install vowpalwabbit (vw-words, vw-char4 not run)", file=sys.stderr)
        systems = [s for s in systems if s not in VW_SYSTEMS]
    for path in (SMS_PATH, ENRON_PATH, SPAMASSASSIN_PATH):
        if not path.is_file():
            print(f"corpus not found: {path}", file=sys.stderr)
            return 2
    candidates = [built_in_candidate(s) for s in systems if s in STREAM_NB_SYSTEMS]
    candidates += [Candidate.parse(spec) for spec in args.variant]
    corpora = args.corpus or list(CORPORA)
    print(f"python {platform.python_version()} on {platform.machine()}; streams {corpora}"
          f"{' (quick: enron1 only)' if args.quick else ''}; SpamAssassin shuffle seed {args.seed}")
    print(HEADER, flush=True)
    started = time.perf_counter()
    lines: list[str] = []
    cache = FeatureCache()
    for stream in corpora:
        messages = load_stream(stream, args.quick, args.seed)
        labels = [m.label for m in messages]
        events = mail_events(stream, messages) if candidates else []
        results: dict[str, Measures] = {}
        peer_outputs: dict[str, tuple] = {}

        def run_peers(workdir: Path) -> None:  # beside the Python systems: they are processes
            for peer in (p for p in PEERS if p in systems):
                began = time.perf_counter()
                try:
                    peer_outputs[peer] = (PEER_RUNNERS[peer](messages, workdir), time.perf_counter() - began)
                except (subprocess.CalledProcessError, RuntimeError) as error:
                    peer_outputs[peer] = (error, 0.0)

        with tempfile.TemporaryDirectory(prefix="mail_quality_") as workdir:
            peers = threading.Thread(target=run_peers, args=(Path(workdir),))
            peers.start()
            for candidate in candidates:
                began = time.perf_counter()
                scores, learned = run_candidate(candidate, stream, messages, cache, events, Path(workdir))
                neutral = NEUTRAL_ROBINSON if candidate.scorer == "robinson" else 0.0
                results[candidate.name] = Measures.of(scores, labels, neutral, learned, time.perf_counter() - began)
                print(row(stream, candidate.name, len(messages), results[candidate.name]), flush=True)
            for system in (s for s in VW_SYSTEMS if s in systems):  # here, not beside: they hold the GIL
                began = time.perf_counter()
                scores = vw_scores(system, messages)
                results[system] = Measures.of(scores, labels, NEUTRAL[system], None, time.perf_counter() - began)
                print(row(stream, system, len(messages), results[system]), flush=True)
            peers.join()
        for peer in (p for p in PEERS if p in peer_outputs):
            scores, seconds = peer_outputs[peer]
            if isinstance(scores, Exception):
                print(f"{stream:13s} {peer:22s} failed: {scores}", flush=True)
                continue
            results[peer] = Measures.of(scores, labels, NEUTRAL[peer], None, seconds)
            print(row(stream, peer, len(messages), results[peer]), flush=True)
        lines += verdicts(stream, results)
        cache = FeatureCache()  # one stream's features at a time in memory
    print("\nTargets (issues 23 and 35)")
    print("\n".join(lines))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 2 if vw_missing else 0


if __name__ == "__main__":
    sys.exit(main())
