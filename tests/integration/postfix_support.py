"""A real Postfix for tests: a private instance (its own config_directory, queue and data
directories, an smtpd on a loopback port), delivering example.test's mailboxes to Maildirs, with
the milter settings of examples/postfix/main.cf as shipped (its address and default action the
test's); and swaks to send it mail.

Postfix is Debian's `postfix`, started as root (`postfix -c DIR start`: its master runs as root
and its daemons as the postfix user). Where it or swaks is missing, or the tests do not run as
root, the tests skip with one line, except under CI=true, where .ci/run installs them: a green
CI must not hide a skipped mail path.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

POSTFIX = "/usr/sbin/postfix"
MAILBOX_UID = 65534  # the virtual mailboxes' owner (nobody)


def require_postfix() -> None:
    """Skip (fail under CI=true) unless Postfix, swaks and root are there."""
    missing = [what for what, there in (("postfix (Debian package postfix)", Path(POSTFIX).exists()),
                                        ("swaks (Debian package swaks)", shutil.which("swaks") is not None),
                                        ("root (Postfix's master runs as root)", os.geteuid() == 0))
               if not there]
    if missing:
        why = "the Postfix tests need " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(why + " (.ci/run installs them under CI=true)")
        pytest.skip(why)
    try:
        pwd.getpwnam("postfix")
    except KeyError:
        pytest.fail("the postfix user is missing: the Debian package creates it")


EXAMPLE_MAIN_CF = Path(__file__).resolve().parents[2] / "examples" / "postfix" / "main.cf"


def shipped_milter_lines(milters: str, default_action: str) -> str:
    """examples/postfix/main.cf as shipped, with this test's milter address and default action."""
    lines = []
    for line in EXAMPLE_MAIN_CF.read_text().splitlines():
        if line.startswith("smtpd_milters ="):
            line = f"smtpd_milters = {milters}"
        elif line.startswith("milter_default_action ="):
            line = f"milter_default_action = {default_action}"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    assert f"smtpd_milters = {milters}\n" in text and "non_smtpd_milters = $smtpd_milters" in text
    return text


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Postfix:
    """One private Postfix: smtpd on 127.0.0.1:`port`, mailboxes `users`@example.test in
    `mail/<user>/` (Maildir), `milters` as smtpd_milters (and non_smtpd_milters)."""

    def __init__(self, milters: str, default_action: str = "tempfail", users=("ann", "bob")) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="stream-nb-postfix-", dir="/tmp"))  # maillog_file_prefixes
        self.root.chmod(0o755)  # the postfix user walks into it
        self.port = free_port()
        self.users = list(users)
        self.etc, self.queue, self.data, self.mail = (self.root / name for name in ("etc", "queue", "data", "mail"))
        for directory in (self.etc, self.queue, self.data, self.mail):
            directory.mkdir()
        shutil.chown(self.data, "postfix")
        os.chown(self.mail, MAILBOX_UID, MAILBOX_UID)
        self.maillog = self.root / "maillog"
        mailboxes = ", ".join(f"{user}@example.test={user}/" for user in self.users)
        (self.etc / "main.cf").write_text(f"""\
compatibility_level = 3.6
queue_directory = {self.queue}
data_directory = {self.data}
mail_owner = postfix
setgid_group = postdrop
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
myhostname = mx.example.test
mydestination =
relayhost =
mynetworks = 127.0.0.0/8
smtputf8_enable = no
alias_maps =
alias_database =
virtual_mailbox_domains = example.test
virtual_mailbox_base = {self.mail}
virtual_mailbox_maps = inline:{{ {mailboxes} }}
virtual_uid_maps = static:{MAILBOX_UID}
virtual_gid_maps = static:{MAILBOX_UID}
virtual_minimum_uid = 1
maillog_file = {self.maillog}
maillog_file_prefixes = /tmp
message_size_limit = 20480000
""" + shipped_milter_lines(milters, default_action))
        shipped = Path("/etc/postfix/master.cf")
        if not shipped.exists():  # the package's prototype, before any postinst wrote master.cf
            shipped = Path("/usr/share/postfix/master.cf.dist")
        if not shipped.exists():
            shipped = Path("/etc/postfix/master.cf.proto")
        master = shipped.read_text().splitlines()
        lines = [f"127.0.0.1:{self.port} inet n - n - - smtpd"]
        lines += [line for line in master if not line.startswith(("smtp      inet", "#smtp      inet"))]
        (self.etc / "master.cf").write_text("\n".join(lines) + "\n")
        for name in ("dynamicmaps.cf",):
            if (Path("/etc/postfix") / name).exists():
                shutil.copy(Path("/etc/postfix") / name, self.etc / name)
        if (Path("/etc/postfix") / "dynamicmaps.cf.d").is_dir():
            shutil.copytree(Path("/etc/postfix") / "dynamicmaps.cf.d", self.etc / "dynamicmaps.cf.d")

    def postfix(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([POSTFIX, "-c", str(self.etc), *args], capture_output=True, text=True, timeout=60)

    def start(self) -> Postfix:
        done = self.postfix("start")
        if done.returncode != 0:
            raise RuntimeError(f"postfix start: {done.stderr.strip()}\n{self.log_tail()}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"postfix's smtpd is not listening on {self.port}\n{self.log_tail()}")

    def stop(self) -> None:
        self.postfix("stop")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (self.queue / "pid" / "master.pid").exists():
            time.sleep(0.1)
        shutil.rmtree(self.root, ignore_errors=True)

    def set(self, **parameters: str) -> None:
        """postconf -e, then a reload (new smtpd processes read it)."""
        subprocess.run(["postconf", "-c", str(self.etc), "-e", *(f"{k}={v}" for k, v in parameters.items())],
                       check=True, capture_output=True, timeout=30)
        self.postfix("reload")

    def send(self, message: bytes, to: str = "ann@example.test", timeout: float = 120) -> tuple[int, str]:
        """swaks: (the SMTP code of the end of data, or of the first refusal; the transcript)."""
        done = subprocess.run(["swaks", "--server", f"127.0.0.1:{self.port}", "--from", "sender@example.org",
                               "--to", to, "--data", "-", "--timeout", str(int(timeout)), "--hide-informational"],
                              input=message, capture_output=True, timeout=timeout + 30)
        transcript = done.stdout.decode("utf-8", "replace")
        code = 0
        for line in transcript.splitlines():
            marker, _, text = line.partition(" ")
            text = text.lstrip()
            if marker in ("<-", "<**") and text[:3].isdigit() and text[3:4] in (" ", ""):
                if text.startswith("221"):  # QUIT's answer
                    break
                code = int(text[:3])  # the last answer: the end of data's, or the first refusal
                if marker == "<**":
                    break
        return code, transcript

    def delivered(self, user: str = "ann") -> list[bytes]:
        """The messages in user's Maildir (new/), oldest first."""
        new = self.mail / user / "new"
        if not new.is_dir():
            return []
        paths = sorted(new.iterdir(), key=lambda path: path.stat().st_mtime_ns)
        return [path.read_bytes() for path in paths]

    def wait_delivered(self, count: int, user: str = "ann", timeout: float = 60) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = self.delivered(user)
            if len(messages) >= count:
                return messages
            time.sleep(0.1)
        raise AssertionError(f"{len(self.delivered(user))} of {count} messages delivered to {user}\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.maillog.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no maillog)"
