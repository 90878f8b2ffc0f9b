"""Two peer spam filters as milters for a private Postfix: the latency benchmark's anchors.

Each peer runs from Debian's packages with their stock rules, from a fresh directory under the
caller's workdir (its configuration, state, sockets, pid files and logs; stop() removes it),
as foreground children of this process, on private loopback ports. Nothing outside that
directory is written (workdir itself gets search permission for others, so the daemons' users
reach it). Every check that needs the network is off: the testbed has none, and DNS timeouts
would swamp the latency being measured. Both scan a few messages before start returns (the
first scans load rules lazily and take up to seconds).

Postfix reaches them on a unix socket by default, which its smtpd must see: no chroot for it
in master.cf, or the path is looked up inside the chroot. Over TCP (transport="inet") Postfix's
small milter writes meet Nagle's algorithm and delayed ACKs: 40-70 ms more per message here.

rspamd 3.4: `rspamd -f -c /etc/rspamd/rspamd.conf` with private LOCAL_CONFDIR, DBDIR, RUNDIR
and LOGDIR; the proxy worker in milter mode (Debian's worker-proxy.inc) hands each message to
one normal worker; the controller is up for `rspamc learn_spam|learn_ham`; workers as _rspamd.
  on:  the stock local rules (regexp rules, composites, chartable, mime_types on the packaged
       map, forged_recipients, maillist, force_actions, ...), GTUBE; the Bayes classifier, its
       tokens in a private in-memory redis-server (untrained, it scores nothing until 200
       learns of each class); headers X-Spam-Status, X-Spamd-Result, X-Spamd-Bar,
       X-Rspamd-Action, -Server, -Queue-Id, added for loopback clients too.
  off: DNS and HTTP checks: rbl (DNSBLs, SURBL/URIBL, DNSWL, email lists), spf, dkim, dmarc,
       arc, asn, fuzzy_check, phishing, url_redirector, hfilter (HELO/hostname lookups),
       once_received (PTR), mx_check, rspamd_update; the remote maps' only users or the off
       checks' dependants: multimap (freemail/disposable lists), mid, whitelist; dkim_signing
       (outbound mail). Redis serves Bayes alone, so greylist, ratelimit, neural, replies and
       history_redis stay off.

SpamAssassin 4.0.1: `spamd` with the packaged rules (/usr/share/spamassassin, no sa-update) and
/etc/spamassassin, as debian-spamd, --local (no network tests) plus dns_available no,
skip_rbl_checks 1, use_razor2 0, use_pyzor 0; no user configuration; Bayes on in a private
database (untrained, skipped until 200 learns of each class), auto-learn off (rspamd has none
by default either); --allow-tell, so `spamc -L spam|ham` trains it. In front, `spamass-milter -m`
(headers only, the body untouched) as debian-spamd, one `spamc` per message: X-Spam-Status and
X-Spam-Checker-Version on every message, X-Spam-Flag and X-Spam-Level on spam. It rejects
nothing (no -r). Mail from loopback gets ALL_TRUSTED (-1.0): Postfix's Received line is from
127.0.0.1, a trusted relay.

rspamd's actions are Debian's: reject (SMTP 554) from 15, "X-Spam: Yes" from 6; its greylist
action (from 4) accepts, no greylist module being on. Do not chain the two: spamass-milter
replaces the X-Spam-Status it finds.

Needs root: the daemons run as their Debian users, as the packages run them.

    milter = start_rspamd(workdir)  # milter.address is for smtpd_milters
    try: ...
    finally: milter.stop()
"""

from __future__ import annotations

import os
import pwd
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

RSPAMD_USER = "_rspamd"
SPAMD_USER = "debian-spamd"
START_TIMEOUT = 120.0  # rspamd compiles its TLD list and hyperscan databases: 20-35 s here
STOP_TIMEOUT = 10.0
WARM_UP_SCANS = 6  # spamd's first scans took 2.2, 0.6, 0.3 s, then 0.08
WARM_UP_MESSAGE = (b"From: Anchor <anchor@example.org>\r\nTo: ann@example.test\r\nSubject: warm-up\r\n"
                   b"Message-ID: <warm-up@example.org>\r\n\r\nA message to load the rules with.\r\n")

# rspamd modules that look things up in DNS or over HTTP, or only serve those that do.
RSPAMD_NETWORK_MODULES = (
    "rbl", "surbl", "emails", "spf", "dkim", "dmarc", "arc", "asn", "fuzzy_check", "phishing",
    "url_redirector", "hfilter", "once_received", "mx_check", "rspamd_update", "multimap", "mid",
    "whitelist", "dkim_signing",
)

SPAMASSASSIN_SETTINGS = (
    "dns_available no", "skip_rbl_checks 1", "use_razor2 0", "use_pyzor 0",  # --local, made sure
    "use_bayes 1", "bayes_auto_learn 0",
)


class AnchorMilter:
    """A started peer: `address` in smtpd_milters notation, `ports` its loopback TCP ports by
    role; stop() ends its processes, last started first, and removes its directory."""

    def __init__(self, name: str, address: str, directory: Path) -> None:
        self.name = name
        self.address = address
        self.directory = directory
        self.ports: dict[str, int] = {}
        self.processes: list[subprocess.Popen] = []

    def stop(self) -> None:
        while self.processes:
            end_process_group(self.processes.pop())
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return f"AnchorMilter({self.name!r}, {self.address!r})"


def available() -> dict[str, str | None]:
    """name -> None where the peer can run here, else one line saying what is missing."""
    def missing(programs: tuple[str, ...], user: str) -> str | None:
        absent = [program for program in programs if shutil.which(program) is None]
        try:
            pwd.getpwnam(user)
        except KeyError:
            absent.append(f"the user {user}")
        if os.geteuid() != 0:
            absent.append("root (to run the daemons as their own users)")
        return "needs " + ", ".join(absent) if absent else None

    return {"rspamd": missing(("rspamd", "redis-server"), RSPAMD_USER),
            "spamassassin": missing(("spamd", "spamc", "spamass-milter"), SPAMD_USER)}


def start_rspamd(workdir: Path, transport: str = "unix") -> AnchorMilter:
    return _started("rspamd", workdir, configure_and_run_rspamd, transport)


def _started(name: str, workdir: Path, configure_and_run, transport: str) -> AnchorMilter:
    """A peer configured and running in a private directory of `workdir`; stopped if that fails."""
    milter = AnchorMilter(name, "", private_directory(workdir, name))
    try:
        configure_and_run(milter, transport)
    except BaseException:
        milter.stop()
        raise
    return milter


def configure_and_run_rspamd(milter: AnchorMilter, transport: str) -> None:
    directory = milter.directory
    proxy, normal, controller, redis = free_ports(4)
    milter.address = milter_address(directory, transport, proxy)
    milter.ports = {"normal": normal, "controller": controller, "redis": redis}
    if transport == "inet":
        milter.ports["milter"] = proxy
    conf, db, run, log, tmp, redis_dir = (directory / name
                                          for name in ("conf", "db", "run", "log", "tmp", "redis"))
    override, local = conf / "override.d", conf / "local.d"
    for path in (override, local, db, run, log, tmp, redis_dir):
        path.mkdir(parents=True)
    # Postfix's smtpd connects as postfix; the socket is in this private directory.
    milter_socket = f"{directory / 'milter.sock'} mode=0666" if transport == "unix" else f"127.0.0.1:{proxy}"
    # override.d, not local.d: the stock bind_socket (localhost:1133x) is replaced, not added to.
    (override / "worker-proxy.inc").write_text(
        f'bind_socket = "{milter_socket}";\n'
        f'upstream "local" {{ default = yes; hosts = "127.0.0.1:{normal}"; }}\n')
    (override / "worker-normal.inc").write_text(f'bind_socket = "127.0.0.1:{normal}";\n')
    (override / "worker-controller.inc").write_text(f'bind_socket = "127.0.0.1:{controller}";\n')
    (override / "options.inc").write_text(f'tempdir = "{tmp}";\n')
    for module in RSPAMD_NETWORK_MODULES:
        (override / f"{module}.conf").write_text("enabled = false;\n")
    # The packaged copy of this map, not maps.rspamd.com's.
    (override / "mime_types.conf").write_text('file = ["${CONFDIR}/maps.d/mime_types.inc"];\n')
    # Redis for the classifier only: a global one would switch greylist, ratelimit, neural on.
    (local / "classifier-bayes.conf").write_text(f'servers = "127.0.0.1:{redis}";\n')
    (local / "milter_headers.conf").write_text(
        'extended_spam_headers = true;\n'
        'use = ["x-spam-status", "x-spamd-bar"];\n'
        'skip_local = false;\n'  # the benchmark's clients are on loopback
        'skip_authenticated = false;\n')
    chown_tree(directory, RSPAMD_USER)
    logs = [log / "rspamd.log", log / "stderr.log", redis_dir / "redis.log"]
    account = pwd.getpwnam(RSPAMD_USER)
    milter.processes.append(spawn(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(redis), "--dir", str(redis_dir),
         "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", str(redis_dir / "redis.log")],
        redis_dir / "stderr.log", cwd=redis_dir, user=account.pw_uid, group=account.pw_gid, extra_groups=[]))
    wait_accepting(redis, milter, logs)
    # The main process stays root (it binds, watches); its workers run as _rspamd.
    milter.processes.append(spawn(
        ["rspamd", "-f", "-c", "/etc/rspamd/rspamd.conf", "-u", RSPAMD_USER, "-g", RSPAMD_USER,
         f"--var=LOCAL_CONFDIR={conf}", f"--var=DBDIR={db}", f"--var=RUNDIR={run}", f"--var=LOGDIR={log}"],
        log / "stderr.log", cwd=directory))
    for endpoint in (normal, controller, milter_endpoint(milter)):
        wait_accepting(endpoint, milter, logs)
    # Until its hs_helper has compiled the regexps, the normal worker matches them with PCRE,
    # several times slower: measure the state rspamd runs in for good.
    hyperscan_loaded = re.compile(r"\(normal\).*hyperscan database .* has been loaded")
    wait_logged(log / "rspamd.log", hyperscan_loaded, milter, logs)
    for _ in range(WARM_UP_SCANS):
        request = urllib.request.Request(f"http://127.0.0.1:{normal}/checkv2", data=WARM_UP_MESSAGE)
        urllib.request.urlopen(request, timeout=30).read()


def start_spamassassin(workdir: Path, transport: str = "unix") -> AnchorMilter:
    return _started("spamassassin", workdir, configure_and_run_spamassassin, transport)


def configure_and_run_spamassassin(milter: AnchorMilter, transport: str) -> None:
    directory = milter.directory
    spamd, milter_port = free_ports(2)
    milter.address = milter_address(directory, transport, milter_port)
    milter.ports = {"spamd": spamd}
    if transport == "inet":
        milter.ports["milter"] = milter_port
    home, bayes, run = (directory / name for name in ("home", "bayes", "run"))
    for path in (home, bayes, run):
        path.mkdir()
    chown_tree(directory, SPAMD_USER)
    logs = [directory / "spamd.log", directory / "spamd.stderr", directory / "milter.log"]
    account = pwd.getpwnam(SPAMD_USER)
    environment = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    command = ["spamd", "--listen", f"127.0.0.1:{spamd}", "--local", "--nouser-config", "--allow-tell",
               "--username", SPAMD_USER, "--groupname", SPAMD_USER, f"--helper-home-dir={home}",
               "--pidfile", str(run / "spamd.pid"), "--syslog", str(directory / "spamd.log")]
    for line in (*SPAMASSASSIN_SETTINGS, f"bayes_path {bayes}/bayes"):
        command += ["--cf", line]
    milter.processes.append(spawn(command, directory / "spamd.stderr", cwd=directory, env=environment))
    wait_accepting(spamd, milter, logs)
    for _ in range(WARM_UP_SCANS):
        subprocess.run(["spamc", "-c", "-d", "127.0.0.1", "-p", str(spamd)], input=WARM_UP_MESSAGE,
                       capture_output=True, timeout=60, env=environment)
    listen = str(directory / "milter.sock") if transport == "unix" else f"inet:{milter_port}@127.0.0.1"
    milter.processes.append(spawn(
        ["spamass-milter", "-m", "-p", listen, "-P", str(run / "spamass-milter.pid"),
         "--", "-d", "127.0.0.1", "-p", str(spamd)],
        directory / "milter.log", cwd=directory, env=environment, user=account.pw_uid, group=account.pw_gid,
        extra_groups=[], umask=0o000,  # its socket: Postfix's smtpd connects as postfix
        preexec_fn=limit_descriptors))
    wait_accepting(milter_endpoint(milter), milter, logs)


def limit_descriptors() -> None:
    """Before each spamc, spamass-milter's child closes every descriptor up to the limit: the
    limit a systemd unit gets (1024), not this process's (tens of thousands here)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def private_directory(workdir: Path, name: str) -> Path:
    """A fresh directory under workdir that the daemons' users can reach."""
    workdir = Path(workdir).resolve()
    # Search permission only (no listing), so a mkdtemp (0700) workdir lets them through.
    workdir.chmod(workdir.stat().st_mode | 0o111)
    for parent in workdir.parents:
        if not parent.stat().st_mode & 0o001:
            raise RuntimeError(f"the daemons' users cannot reach {workdir}: "
                               f"{parent} is not searchable by others")
    directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=workdir))
    directory.chmod(0o755)
    return directory


def milter_address(directory: Path, transport: str, port: int) -> str:
    """The smtpd_milters address: a unix socket in directory, or the loopback port."""
    if transport == "unix":
        path = directory / "milter.sock"
        if len(str(path)) > 100:  # sun_path holds 108 bytes
            raise ValueError(f"{path} is too long for a unix socket: a shorter workdir, or transport='inet'")
        return f"unix:{path}"
    if transport == "inet":
        return f"inet:127.0.0.1:{port}"
    raise ValueError(f"transport {transport!r}: 'unix' or 'inet'")


def milter_endpoint(milter: AnchorMilter) -> int | Path:
    """What wait_accepting probes: the socket's path or the port."""
    kind, _, rest = milter.address.partition(":")
    return Path(rest) if kind == "unix" else int(rest.rpartition(":")[2])


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held open together, so none repeats)."""
    probes = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            probes.append(probe)
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def chown_tree(directory: Path, user: str) -> None:
    account = pwd.getpwnam(user)
    for path in [directory, *directory.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)


def spawn(command: list[str], output: Path, **options) -> subprocess.Popen:
    with open(output, "ab") as sink:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True, **options)


def wait_accepting(endpoint: int | Path, milter: AnchorMilter, logs: list[Path]) -> None:
    """Until a loopback TCP port or a unix socket accepts a connection."""
    if isinstance(endpoint, Path):
        family, target = socket.AF_UNIX, str(endpoint)
    else:
        family, target = socket.AF_INET, ("127.0.0.1", endpoint)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        check_running(milter, logs)
        with socket.socket(family) as probe:
            if probe.connect_ex(target) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{milter.name}: nothing accepts on {endpoint} after {START_TIMEOUT:.0f} s\n"
                       + tails(logs))


def wait_logged(log: Path, pattern: re.Pattern, milter: AnchorMilter, logs: list[Path]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        check_running(milter, logs)
        if log.exists() and pattern.search(log.read_text(errors="replace")):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{milter.name}: no {pattern.pattern!r} in {log} after {START_TIMEOUT:.0f} s\n"
                       + tails(logs))


def check_running(milter: AnchorMilter, logs: list[Path]) -> None:
    for process in milter.processes:
        if process.poll() is not None:
            raise RuntimeError(f"{milter.name}: {process.args[0]} exited ({process.returncode})\n"
                               + tails(logs))


def tails(logs: list[Path], lines: int = 20) -> str:
    parts = []
    for log in logs:
        try:
            parts.append(f"--- {log}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        except FileNotFoundError:
            parts.append(f"--- {log} (none)")
    return "\n".join(parts)


def end_process_group(process: subprocess.Popen) -> None:
    """SIGTERM to the child's process group (its workers and helpers too), SIGKILL to what is
    left after STOP_TIMEOUT; the child reaped."""
    signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline and signal_group(process, 0):
        process.poll()  # reap the leader, or the group never looks empty
        time.sleep(0.05)
    signal_group(process, signal.SIGKILL)
    process.wait()


def signal_group(process: subprocess.Popen, sig: int) -> bool:
    """Whether the group (start_new_session: its id is the child's pid) still had a member."""
    try:
        os.killpg(process.pid, sig)
        return True
    except ProcessLookupError:
        return False
