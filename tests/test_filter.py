"""`stream-nb filter` and the verdict headers (stream_nb.verdicts): a message on stdin judged by
the newest checkpoint of configs/mail.toml as shipped, bogofilter's exit codes, the message
passed through byte for byte with the headers, forged verdict headers taken out, and the mail
never lost on an error. The shipped delivery examples (examples/procmail, examples/maildrop)
run with the real procmail and maildrop, and the Dovecot sieve scripts of `stream-nb learn`
(examples/dovecot) compile with Pigeonhole's sievec under the shipped configuration; these
need Debian's procmail, maildrop and dovecot-sieve (installed by .ci/run under CI=true, where
their absence fails the tests; elsewhere they skip)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stream_nb.checkpoint import config_fingerprint
from stream_nb.checkpoint.store import CheckpointStore
from stream_nb.config import load_config
from stream_nb.replay.prequential import Contender, replay_contenders
from stream_nb.verdicts.headers import (
    FOLD_AT,
    clue_text,
    status_of,
    verdict_headers,
    with_verdict_headers,
)

from corpora import load_spamassassin_2003

REPO = Path(__file__).resolve().parents[1]
MAIL_TOML = REPO / "configs" / "mail.toml"
EXAMPLES = REPO / "examples"
STREAM_NB = str(Path(sys.executable).parent / "stream-nb")  # this checkout's command, as installed by `make setup`
SPAM_FOLDER, HAM_FOLDER = "spam-2", "easy-ham-2"


def filter_command(*args: str, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stream_nb.cli", "filter", *args], input=stdin, capture_output=True,
                          timeout=120, cwd=REPO)


# ---- the headers ------------------------------------------------------------------------------

def test_forged_verdict_headers_go_and_the_rest_of_the_message_stays_byte_for_byte():
    message = (b"From someone@example.org Mon Jan  1 00:00:00 2024\r\n"
               b"Subject: cheap\r\nX-Spam-Status: No, score=-9\r\n\tforged=yes\r\nx-spam-flag: NO\r\n"
               b"X-Spam-Scorer: kept (another header)\r\nTo: ann@example.org\r\n\r\n"
               b"X-Spam-Flag: NO\r\nthe body, a header-like line and all\r\n")
    headers = verdict_headers("Yes", 4.25, "spam", [("cheap", 1.5)])
    out = with_verdict_headers(message, headers)
    assert out == (b"From someone@example.org Mon Jan  1 00:00:00 2024\r\n"
                   b"Subject: cheap\r\nX-Spam-Scorer: kept (another header)\r\nTo: ann@example.org\r\n"
                   b"X-Spam-Flag: YES\r\nX-Spam-Score: 4.250\r\nX-Spam-Status: Yes, score=4.250 verdict=spam "
                   b"clues=cheap:1.500\r\n\r\n"
                   b"X-Spam-Flag: NO\r\nthe body, a header-like line and all\r\n")


def test_a_message_of_headers_alone_or_of_no_headers_gets_a_well_formed_header_block():
    headers = verdict_headers("No", -2.0, "ham", None)
    assert with_verdict_headers(b"Subject: a\nTo: b", headers) == (
        b"Subject: a\nTo: b\nX-Spam-Score: -2.000\nX-Spam-Status: No, score=-2.000 verdict=ham\n\n")
    assert with_verdict_headers(b"\nbody only\n", headers) == (
        b"X-Spam-Score: -2.000\nX-Spam-Status: No, score=-2.000 verdict=ham\n\nbody only\n")


def test_clues_of_any_text_are_ascii_header_text_and_long_lines_are_folded():
    assert clue_text("viagra") == "viagra"
    assert clue_text("free money") == '"free money"'
    assert clue_text('na\u00efve "x"') == '"na\\xefve \\"x\\""'
    assert clue_text("#s:free") == '"#s:free"'  # a colon would end the name
    assert clue_text("x" * 100) == "x" * 64 + "..."
    clues = [(f"word{i} and more", 0.5 + i) for i in range(12)] + [("\u0444\u0438\u0433", 0.25)]
    block = with_verdict_headers(b"Subject: s\n\nb\n", verdict_headers("Unsure", 0.5, "unsure", clues))
    head = block.split(b"\n\n")[0].decode("ascii")
    lines = head.split("\n")
    assert all(len(line) <= FOLD_AT for line in lines), lines
    status = re.sub(r"\n\t", " ", head.split("X-Spam-Status: ", 1)[1])  # unfolded
    names = [name for name, _ in re.findall(r'("(?:[^"\\]|\\.)*"|[^,:= ]+):(\d+\.\d{3})', status.split("clues=", 1)[1])]
    assert names == [clue_text(name) for name, _ in clues]


@pytest.mark.parametrize("verdict, label, status", [
    ("spam", "spam", "Yes"), ("ham", "ham", "No"), ("unsure", "spam", "Unsure"),
    (None, "spam", "Yes"), (None, "ham", "No"), (None, None, "No"),
])
def test_the_status_is_the_bands_verdict_else_the_most_probable_class(verdict, label, status):
    assert status_of(verdict, label, "spam") == status


# ---- the command, on a checkpoint of mail.toml ---------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory) -> tuple[Path, list, object, object]:
    """A checkpoint of configs/mail.toml as shipped, learned from 800 SpamAssassin messages as a
    worker learns them (predict_learn under its training); the held-out messages, the model and
    the configuration."""
    config = load_config(MAIL_TOML)
    messages = [(folder, data) for folder, data in load_spamassassin_2003() if folder in (SPAM_FOLDER, HAM_FOLDER)]
    random.Random(5).shuffle(messages)
    train, held_out = messages[:800], messages[800:824]
    contender = Contender.of("mail.toml", config)  # learned as the worker learns: by its regime, view by view
    replay_contenders([{"id": f"m{i}", "mail": data, "label": "spam" if folder == SPAM_FOLDER else "ham"}
                       for i, (folder, data) in enumerate(train)], [contender], batch_size=100)
    model = contender.model
    directory = tmp_path_factory.mktemp("checkpoints")
    CheckpointStore(directory).save(model.to_state(), {}, config_fingerprint(config.resolved()))
    return directory, held_out, model, contender.featurise_one


def test_filter_judges_as_the_checkpoints_model_with_bogofilters_exit_codes(checkpoint_dir):
    """Each held-out message: the exit status is the band's verdict on P(spam) (mail.toml: [0.1,
    0.9]), X-Spam-Score is the checkpoint's model's combined log-odds (its three views' log-odds
    per sqrt of each one's distinct features, weighed: stream_nb.model.experts), and the body is
    the message's. Spam and ham are told apart (a figure: at least 22 of the 24 right)."""
    directory, held_out, model, featurise_one = checkpoint_dir
    right = 0
    for folder, data in held_out:
        done = filter_command("--config", str(MAIL_TOML), "--checkpoint-dir", str(directory), "-p", stdin=data)
        proba = model.predict_proba_one(featurise_one({"mail": data}))
        log_scores = dict(zip(proba, proba.log_scores))
        score = log_scores["spam"] - log_scores["ham"]
        expected = 0 if proba["spam"] >= 0.9 else 1 if proba["spam"] <= 0.1 else 2
        assert done.returncode == expected, (done.returncode, proba, done.stderr)
        out = done.stdout
        head, body = out.split(b"\n\n", 1) if b"\n\n" in out else (out, b"")
        assert f"X-Spam-Score: {score:.3f}".encode() in head.split(b"\n")
        assert body == data.split(b"\n\n", 1)[1]
        assert (b"X-Spam-Flag: YES" in head.split(b"\n")) == (expected == 0)
        right += (folder == SPAM_FOLDER) == (expected == 0) and expected != 2
    assert right >= 22, right


def test_filter_without_a_model_passes_the_mail_through_unchanged_and_says_why(tmp_path):
    message = b"Subject: hello\n\nbody\n"
    done = filter_command("--config", str(MAIL_TOML), "--checkpoint-dir", str(tmp_path), "-p", stdin=message)
    assert done.returncode == 3
    assert done.stdout == message
    assert b"no valid checkpoint in" in done.stderr
    done = filter_command("--config", str(MAIL_TOML), "--checkpoint-dir", str(tmp_path / "missing"), stdin=message)
    assert (done.returncode, done.stdout) == (3, b"")
    assert b"no checkpoint directory" in done.stderr


def test_filter_passes_the_mail_through_unchanged_when_memory_runs_out(monkeypatch, capsys, checkpoint_dir):
    """parse_mail raises MemoryError rather than give a reading cut short: `filter -p` then
    writes the message as it came and exits 3 (an error), as for any other failure to judge."""
    import io
    from types import SimpleNamespace

    from stream_nb.cli import build_parser
    from stream_nb.verdicts import filter as filter_module

    directory, held_out, _, _ = checkpoint_dir
    data = held_out[0][1]

    def out_of_memory(self, message):
        raise MemoryError

    monkeypatch.setattr(filter_module.MessageJudge, "judge", out_of_memory)
    written = io.BytesIO()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    monkeypatch.setattr(sys, "stdout", SimpleNamespace(buffer=written))
    args = build_parser().parse_args(["filter", "--config", str(MAIL_TOML), "--checkpoint-dir", str(directory), "-p"])
    assert filter_module.run_filter(args) == filter_module.EXIT_ERROR
    assert written.getvalue() == data
    assert capsys.readouterr().err == "stream-nb filter: MemoryError\n"


def test_filter_refuses_a_checkpoint_of_another_configuration(checkpoint_dir):
    directory, held_out, _, _ = checkpoint_dir
    data = held_out[0][1]
    done = filter_command("--config", str(MAIL_TOML), "--checkpoint-dir", str(directory), "--set", "model.alpha=0.5",
                          "-p", stdin=data)
    assert done.returncode == 3 and done.stdout == data
    assert b"fingerprint" in done.stderr


def test_filter_verbose_writes_the_headers_alone(checkpoint_dir):
    directory, held_out, _, _ = checkpoint_dir
    done = filter_command("--config", str(MAIL_TOML), "--checkpoint-dir", str(directory), "-v", stdin=held_out[0][1])
    lines = done.stdout.decode("ascii").splitlines()
    assert [line.split(":", 1)[0] for line in lines if not line.startswith("\t")][-2:] == ["X-Spam-Score",
                                                                                        "X-Spam-Status"]


# ---- the shipped delivery examples, with the real programs ---------------------------------------

def require_program(name: str, package: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    reason = f"{name} not installed (Debian package {package}; .ci/run installs it under CI=true)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def delivery_setup(tmp_path: Path, checkpoint_dir) -> tuple[dict, Path]:
    """A user's home with an empty Maildir (and its Junk folder), a configuration of mail.toml
    whose checkpoint.dir is the test checkpoint's, and the environment a delivery agent runs
    `stream-nb` in (this checkout's on the PATH)."""
    directory, *_ = checkpoint_dir
    home = tmp_path / "home"
    for folder in ("Maildir", "Maildir/.Junk"):
        for sub in ("cur", "new", "tmp"):
            (home / folder / sub).mkdir(parents=True)
    config = tmp_path / "mail.toml"
    config.write_text(f'extends = "{MAIL_TOML}"\n[checkpoint]\ndir = "{directory}"\n')
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home), "STREAM_NB_CONFIG": str(config),
           "PYTHONPATH": str(REPO)}
    return env, home


def delivered(home: Path) -> dict[str, list[bytes]]:
    """{"inbox" | "junk": the messages in its new/ directory}."""
    return {name: [path.read_bytes() for path in sorted((home / folder / "new").iterdir())]
            for name, folder in (("inbox", "Maildir"), ("junk", "Maildir/.Junk"))}


def expected_folders(checkpoint_dir, messages) -> list[str]:
    """Where each message belongs by the filter's verdict: junk when it is spam (exit 0)."""
    directory, *_ = checkpoint_dir
    return ["junk" if filter_command("--config", str(MAIL_TOML), "--checkpoint-dir", str(directory),
                                     stdin=data).returncode == 0 else "inbox" for _, data in messages]


def test_the_procmail_example_files_spam_in_junk_with_the_headers(tmp_path, checkpoint_dir):
    procmail = require_program("procmail", "procmail")
    env, home = delivery_setup(tmp_path, checkpoint_dir)
    messages = checkpoint_dir[1][:8]
    expected = expected_folders(checkpoint_dir, messages)
    assert set(expected) == {"junk", "inbox"}  # both ways taken
    for _, data in messages:
        done = subprocess.run([procmail, "-m", f"HOME={env['HOME']}", f"STREAM_NB_CONFIG={env['STREAM_NB_CONFIG']}",
                               f"STREAM_NB={STREAM_NB}", str(EXAMPLES / "procmail" / "procmailrc")],
                              input=data, capture_output=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
    found = delivered(home)
    assert sorted(len(found[folder]) for folder in found) == sorted(expected.count(folder) for folder in found)
    for (_, data), folder in zip(messages, expected):
        body = data.split(b"\n\n", 1)[1]
        copies = [m for m in found[folder] if m.split(b"\n\n", 1)[1] == body]
        assert len(copies) == 1, folder
        head = copies[0].split(b"\n\n", 1)[0]
        assert (b"\nX-Spam-Flag: YES" in head) == (folder == "junk")
        assert b"\nX-Spam-Score: " in head and b"\nX-Spam-Status: " in head


def test_the_maildrop_example_files_spam_in_junk_and_defers_when_it_cannot_judge(tmp_path, checkpoint_dir):
    maildrop = require_program("maildrop", "maildrop")
    env, home = delivery_setup(tmp_path, checkpoint_dir)
    rc = home / ".mailfilter"
    rc.write_bytes((EXAMPLES / "maildrop" / "mailfilter").read_bytes())
    rc.chmod(0o600)
    messages = checkpoint_dir[1][8:16]
    expected = expected_folders(checkpoint_dir, messages)
    for _, data in messages:
        done = subprocess.run([maildrop, str(rc), env["STREAM_NB_CONFIG"], str(home / "Maildir"), STREAM_NB],
                              input=data, capture_output=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
    found = delivered(home)
    assert {folder: len(found[folder]) for folder in found} == {folder: expected.count(folder) for folder in found}
    assert all(b"\nX-Spam-Flag: YES" in m.split(b"\n\n", 1)[0] for m in found["junk"])
    # no model to judge by: maildrop defers the message (EX_TEMPFAIL, 75), and delivers nothing
    (tmp_path / "mail.toml").write_text(f'extends = "{MAIL_TOML}"\n[checkpoint]\ndir = "{tmp_path / "none"}"\n')
    done = subprocess.run([maildrop, str(rc), env["STREAM_NB_CONFIG"], str(home / "Maildir"), STREAM_NB],
                          input=messages[0][1], capture_output=True, env=env, timeout=120)
    assert done.returncode == 75, (done.returncode, done.stderr)
    assert sum(map(len, delivered(home).values())) == len(messages)


def test_the_dovecot_sieve_scripts_compile_under_the_shipped_configuration(tmp_path):
    sievec = require_program("sievec", "dovecot-sieve")
    config = tmp_path / "dovecot.conf"
    config.write_text(f"!include {EXAMPLES / 'dovecot' / '90-stream-nb-imapsieve.conf'}\n")
    for script in ("learn-spam.sieve", "learn-ham.sieve"):
        done = subprocess.run([sievec, "-c", str(config), str(EXAMPLES / "dovecot" / "sieve" / script),
                               str(tmp_path / f"{script}.svbin")], capture_output=True, timeout=60)
        assert done.returncode == 0, (script, done.stderr)
        assert b'"stream-nb-learn"' in (EXAMPLES / "dovecot" / "sieve" / script).read_bytes()
    # without the configuration's extensions the same scripts are refused: the check is real
    (tmp_path / "empty.conf").write_text("")
    done = subprocess.run([sievec, "-c", str(tmp_path / "empty.conf"), str(EXAMPLES / "dovecot" / "sieve" /
                                                                         "learn-spam.sieve"), str(tmp_path / "x")],
                          capture_output=True, timeout=60)
    assert done.returncode != 0 and b"vnd.dovecot.pipe" in done.stderr
