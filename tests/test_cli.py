"""The dledger console script, run as a user runs it: a separate process."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dledger.testing import TestCluster, consecutive_free_ports, free_ports


def dledger(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dledger.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )


def test_append_get_dump_round_trip(tmp_path: Path):
    node = tmp_path / "dledger-n0"
    assert dledger("append", str(node), "--data", "hello").stdout.split() == ["0"]
    out = dledger("append", str(node), "--stdin", stdin="a\nbb\n\nccc\n").stdout.split()
    assert out == ["1", "2", "3"]  # blank lines are not entries
    assert dledger("get", str(node), "-i", "2").stdout == "bb\n"
    got = json.loads(dledger("get", str(node), "-i", "3", "--json").stdout)
    assert base64.b64decode(got["body_base64"]) == b"ccc" and got["index"] == 3
    lines = dledger("dump", str(node), "--from", "1", "--to", "2", "--json").stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["index"] for r in rows] == [1, 2]
    assert [base64.b64decode(r["body_base64"]) for r in rows] == [b"a", b"bb"]
    digest = dledger("dump", str(node), "--digest").stdout.splitlines()
    assert digest[0] == "begin 0 end 3 endTerm 0"
    assert len(digest) == 5 and digest[1].split()[:4] == ["0", "0", "0", "5"]
    assert dledger("verify", str(node)).returncode == 0


def test_append_with_term_and_committed(tmp_path: Path):
    node = tmp_path / "dledger-n0"
    dledger("append", str(node), "--term", "3", "--data", "x")
    from dledger.store.file import MmapFileStore

    with MmapFileStore(node, readonly=True) as s:
        assert (s.ledger_end_term, s.committed_index) == (3, 0)
    # A lower term than the ledger's is refused, with DLedger's code, and nothing is written.
    res = dledger("append", str(node), "--term", "1", "--data", "y", check=False)
    assert res.returncode == 2 and "INCONSISTENT_TERM" in res.stderr
    with MmapFileStore(node, readonly=True) as s:
        assert s.ledger_end_index == 0


def test_bad_directories_get_clear_errors(tmp_path: Path):
    res = dledger("dump", str(tmp_path / "missing"), check=False)
    assert res.returncode == 2 and "no dledger store" in res.stderr
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    res = dledger("append", str(tmp_path / "junk"), "--data", "x", check=False)
    assert res.returncode == 2 and "not a dledger node directory" in res.stderr
    res = dledger("get", str(tmp_path / "junk"), "-i", "0", check=False)
    assert res.returncode == 2


def test_a_server_config_that_cannot_work_is_one_line_and_no_server(tmp_path: Path):
    port = free_ports(1)[0]
    conf = tmp_path / "n0.toml"
    store = tmp_path / "s"
    base = f'peers = "n0-127.0.0.1:{port}"\nstore_base_dir = "{store}"\nenableDLegerCommitLog = true\n'
    for line, named in [
        ('heartBeatTimeIntervalMs = "x"', "heart_beat_time_interval_ms"),  # used to raise on every tick
        ("id = 'n0'", "unknown config option 'id'"),
        ("maxMessageSize = 0", "max_message_size"),
    ]:
        conf.write_text(base + line + "\n")
        res = dledger("server", "--config", str(conf), check=False)
        assert res.returncode == 2 and named in res.stderr and "n0.toml" in res.stderr, res.stderr
        assert len(res.stderr.splitlines()) == 1 and not res.stdout  # no traceback, never listening
    (tmp_path / "file").write_text("x")
    res = dledger("server", "--peers", f"n0-127.0.0.1:{port}", "--store-dir", str(tmp_path / "file" / "s"), check=False)
    assert res.returncode == 1 and res.stderr.startswith("dledger: [Errno 20]") and len(res.stderr.splitlines()) == 1


def test_cluster_whose_port_is_taken_fails_in_a_line(tmp_path: Path):
    port = consecutive_free_ports(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))
        taken.listen(1)
        res = dledger(
            "cluster", "--nodes", "2", "--base-port", str(port), "--dir", str(tmp_path), "--exit-after-writes",
            check=False,
        )  # fmt: skip
    assert res.returncode == 1 and res.stdout == "", res.stdout
    assert res.stderr.splitlines() == [
        f"dledger cluster: 127.0.0.1:{port + 1} is in use (another group?); choose other ports with --base-port"
    ]


def console_script() -> str:
    """The environment's ``dledger`` console script, as a user runs it (not ``python -m``)."""
    path = Path(sys.executable).with_name("dledger")
    assert path.is_file(), f"no console script beside {sys.executable}: install the package"
    return str(path)


def cluster_from(cwd: Path, temp: Path, nodes: int, **env: str) -> subprocess.CompletedProcess[str]:
    """``dledger cluster --exit-after-writes`` (the console script) run in ``cwd``, its
    temporary directory made under ``temp``."""
    temp.mkdir()
    port = consecutive_free_ports(nodes)
    return subprocess.run(
        [console_script(), "cluster", "--nodes", str(nodes), "--base-port", str(port), "--exit-after-writes"],
        cwd=cwd,
        env=dict(os.environ, TMPDIR=str(temp), **env),
        capture_output=True,
        text=True,
        timeout=150,
    )


SHADOW = "raise ImportError('imported the dledger/ of the working directory')\n"


@pytest.mark.timeout(180)
def test_first_command_from_a_directory_that_shadows_the_package(tmp_path: Path):
    # The README's first command runs in the clone, whose dledger/ has no built extension: the
    # members must import the installed package, not the working directory's.
    clone = tmp_path / "clone"
    (clone / "dledger").mkdir(parents=True)
    (clone / "dledger" / "__init__.py").write_text(SHADOW)
    res = cluster_from(clone, tmp_path / "temp", 3)
    assert res.returncode == 0 and "working directory" not in res.stderr, res.stderr
    assert res.stdout.count("listening on") == 3 and "appended index 2" in res.stdout


# Starts the supervisor, refuses to start a member: a try that fails after the temp dir is made.
MEMBERS_FAIL = "import os, sys\nif 'server' in sys.argv:\n    os._exit(3)\n"


@pytest.mark.timeout(120)
def test_failed_cluster_leaves_no_temporary_directory(tmp_path: Path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(MEMBERS_FAIL)
    res = cluster_from(tmp_path, tmp_path / "temp", 2, PYTHONPATH=str(site))
    assert res.returncode == 1 and "did not start (exit code 3)" in res.stderr, res.stderr
    assert list((tmp_path / "temp").iterdir()) == []


def test_get_out_of_range(tmp_path: Path):
    node = tmp_path / "dledger-n0"
    dledger("append", str(node), "--data", "x")
    res = dledger("get", str(node), "-i", "5", check=False)
    assert res.returncode == 2 and "INDEX_OUT_OF_RANGE" in res.stderr


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path: Path):
    node = tmp_path / "dledger-n0"
    dledger("append", str(node), "--stdin", stdin="".join(f"line {i}\n" for i in range(5000)))
    res = dledger("dump", str(node), "--digest")
    assert res.stderr == ""
    assert len(res.stdout.splitlines()) == 5001


def test_demo_runs(tmp_path: Path):
    out = dledger("demo", "--dir", str(tmp_path), "--count", "10").stdout
    assert "appended 10 entries at [0, 9]" in out
    assert (tmp_path / "dledger-n0" / "checkpoint").is_file()


@pytest.mark.timeout(120)
def test_bench_store_quick_json():
    res = dledger("bench", "store", "--quick", "--json")
    rows = json.loads(res.stdout)
    names = [r["name"] for r in rows]
    assert names == [
        "batch_append_1k",
        "append_100b",
        "random_get",
        "batch_lookup",
        "batch_scan",
        "recovery_crc",
        "crc32",
    ]
    for r in rows:
        assert set(r) == {
            "name",
            "value",
            "unit",
            "baseline_name",
            "baseline_value",
            "ratio",
            "spread",
            "baseline_spread",
        }
        assert r["spread"][0] <= r["value"] <= r["spread"][1]
        assert r["value"] > 0 and r["baseline_value"] > 0
        assert abs(r["ratio"] - r["value"] / r["baseline_value"]) < 0.01 * r["ratio"] + 1e-3


# --- a running group: what the CLI says when something is wrong ---------------------------------


@pytest.fixture(scope="module")
def group_g(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """Three members serving group "g" (not "default")."""
    with TestCluster(tmp_path_factory.mktemp("group-g"), group="g", proxied=False).running() as c:
        yield c


def test_status_names_the_groups_a_member_serves(group_g: TestCluster):
    res = dledger("status", "--peers", group_g.peers, "--group", "default", check=False)
    assert res.returncode == 1
    for m in group_g.ids:
        assert f"{m} (127.0.0.1:{group_g.ports[m]}) did not answer: UNKNOWN_GROUP" in res.stderr
    assert "does not serve group 'default'; it serves g" in res.stderr
    assert "no member answered; name a group the members serve with --group" in res.stderr


def test_group_is_found_when_every_member_serves_one(group_g: TestCluster):
    res = dledger("status", "--peers", group_g.peers)
    rows = res.stdout.splitlines()[1:]
    assert len(rows) == 3 and all(row.split()[2] == "g" for row in rows)
    first = int(dledger("append", "--peers", group_g.peers, "--data", "found").stdout)
    assert dledger("get", "--peers", group_g.peers, "-i", str(first)).stdout == "found\n"
    leader = group_g.wait_leader()
    out = dledger("transfer-leader", "--peers", group_g.peers, "--to", leader).stdout
    assert out.startswith(f"{leader} already leads group g in term ")


@pytest.mark.parametrize("command", [["append", "--data", "x"], ["get", "-i", "0"], ["transfer-leader", "--to", "n1"]])
def test_a_wrong_group_is_an_error_that_names_the_right_one(group_g: TestCluster, command: list[str]):
    res = dledger(command[0], "--peers", group_g.peers, "--group", "nope", *command[1:], check=False)
    assert res.returncode == 2
    assert "UNKNOWN_GROUP" in res.stderr and "does not serve group 'nope'; it serves g" in res.stderr
    assert "--group" in res.stderr


def test_status_shows_each_followers_lag(group_g: TestCluster):
    dledger("append", "--peers", group_g.peers, "--stdin", stdin="".join(f"{i}\n" for i in range(100)))
    leader = group_g.wait_leader()

    def lags() -> dict[str, object]:
        rows = json.loads(dledger("status", "--peers", group_g.peers, "--json").stdout)
        return {r["id"]: r["lag"] for r in rows}

    group_g.wait_for(
        lambda: lags() == {m: (None if m == leader else 0) for m in group_g.ids}, what="followers caught up, lag 0"
    )
    rows = json.loads(dledger("status", "--peers", group_g.peers, "--json").stdout)
    ld = next(r for r in rows if r["id"] == leader)
    assert set(ld["match_index"]) == set(group_g.ids)


def _closed_ports(n: int) -> str:
    return ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(free_ports(n)))


def test_no_member_answers_connection_refused():
    peers = _closed_ports(3)
    members = [tuple(p.split("-", 1)) for p in peers.split(";")]
    res = dledger("status", "--peers", peers, check=False)
    assert res.returncode == 1
    assert res.stderr.count("did not answer: connection refused") == 3
    assert "no member answered" in res.stderr
    # Nothing listens anywhere: said at once (a run far shorter than --timeout; subprocess's
    # timeout fails the test otherwise), one line per member under one that says what failed.
    for command in (["append", "--data", "x"], ["get", "-i", "0"], ["mq", "produce", "--topic", "T", "--data", "x"]):
        res = subprocess.run(
            [sys.executable, "-m", "dledger.cli", *command, "--peers", peers, "--timeout", "600"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert res.returncode in (1, 2), res.stderr
        lines = res.stderr.splitlines()
        assert lines[0].endswith("no member is listening (each refused the connection):"), lines
        assert lines[1:] == [f"  {m} ({a}): connection refused ({NOTHING_LISTENS})" for m, a in members], lines


NOTHING_LISTENS = "nothing listens there: the member is down, or the host:port is wrong"


def test_no_member_answers_timed_out():
    # Listening, never answering: the connection is made (by the kernel's backlog), the request is not served.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        peers = f"n0-127.0.0.1:{s.getsockname()[1]}"
        res = dledger("status", "--peers", peers, "--group", "g", check=False)
        assert res.returncode == 1 and "did not answer: timed out" in res.stderr
        res = dledger("get", "--peers", peers, "--group", "g", "-i", "0", "--timeout", "1", check=False)
        assert res.returncode == 2 and "no member answered within 1s" in res.stderr and "timed out" in res.stderr


@pytest.fixture(scope="module")
def secret_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestCluster, Path]]:
    root = tmp_path_factory.mktemp("secret")
    secret = root / "secret"
    secret.write_text("s3cret\n")
    c = TestCluster(root, size=1, group="g", proxied=False, extra=["--secret-file", str(secret)])
    try:
        c.start_all()
        yield c, secret
    finally:
        c.close()


def test_shared_secret_mismatch_is_named(secret_member: tuple[TestCluster, Path], tmp_path: Path):
    c, secret = secret_member
    res = dledger("status", "--peers", c.peers, check=False)
    assert res.returncode == 1 and "did not answer: shared-secret mismatch" in res.stderr
    assert "this client has none" in res.stderr
    wrong = tmp_path / "wrong"
    wrong.write_text("other")
    # No retry can help: the call gives up when every member has refused, not at its timeout.
    for extra, why in ((["--secret-file", str(wrong)], "wrong secret"), ([], "this client has none")):
        res = dledger("append", "--peers", c.peers, *extra, "--data", "x", "--timeout", "60", check=False)
        assert res.returncode == 2 and "no member accepts this client's shared secret" in res.stderr
        assert "shared-secret mismatch" in res.stderr and why in res.stderr
    assert dledger("status", "--peers", c.peers, "--secret-file", str(secret)).returncode == 0


def test_a_member_holding_another_secret_is_named_in_the_logs(tmp_path: Path):
    # Members refuse each other in silence otherwise: the group just never hears from it.
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text("s3cret")
    wrong.write_text("other")
    c = TestCluster(tmp_path, group="g", proxied=False, extra=["--secret-file", str(right)])
    try:
        c.start("n0")
        c.start("n1")
        c.extra = ["--secret-file", str(wrong)]
        c.start("n2")
        n2 = f"127.0.0.1:{c.ports['n2']}"

        def told() -> bool:
            # n2 cannot reach the others; the leader (n0 or n1) cannot reach n2, and sees n2 leave.
            ours = c.logs["n0"].read_text() + c.logs["n1"].read_text()
            return (
                "cannot authenticate with the peer at 127.0.0.1" in c.logs["n2"].read_text()
                and f"cannot authenticate with the peer at {n2}" in ours
                and "left after our challenge" in ours
            )

        deadline = time.monotonic() + 30
        while not told() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert told(), c.logs["n2"].read_text()[-2000:]
    finally:
        c.close()
    # Once a minute per peer, not on every retry.
    assert all(c.logs[m].read_text().count(f"cannot authenticate with the peer at {n2}") <= 1 for m in ("n0", "n1"))


@dataclass
class Pki:
    ca: Path
    other_ca: Path
    cert: Path
    key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a certificate it signed for 127.0.0.1, and an unrelated CA."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.timezone.utc)

    def build(cn: str, issuer: Any, signer: Any, ca: bool) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        b = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            b = b.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
        return key, b.sign(signer or key, hashes.SHA256())

    pem = serialization.Encoding.PEM
    ca_key, ca = build("test CA", None, None, True)
    _, other = build("other CA", None, None, True)
    key, cert = build("member", ca.subject, ca_key, False)
    out = Pki(d / "ca.pem", d / "other.pem", d / "cert.pem", d / "key.pem")
    out.ca.write_bytes(ca.public_bytes(pem))
    out.other_ca.write_bytes(other.public_bytes(pem))
    out.cert.write_bytes(cert.public_bytes(pem))
    out.key.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return out


def test_tls_client_against_a_plain_member(secret_member: tuple[TestCluster, Path], pki: Pki):
    c, _ = secret_member
    res = dledger("status", "--peers", c.peers, "--tls-ca", str(pki.ca), check=False)
    assert res.returncode == 1 and "did not answer: TLS" in res.stderr


def test_tls_member_against_a_plain_client_or_a_wrong_ca(pki: Pki, tmp_path: Path):
    c = TestCluster(
        tmp_path, size=1, group="g", proxied=False, extra=["--tls-cert", str(pki.cert), "--tls-key", str(pki.key)]
    )
    try:
        c.start_all()
        res = dledger("status", "--peers", c.peers, check=False)
        assert res.returncode == 1
        assert "did not answer: the member closed the connection without answering (does it expect TLS?" in res.stderr
        res = dledger("status", "--peers", c.peers, "--tls-ca", str(pki.other_ca), check=False)
        assert res.returncode == 1 and "did not answer: TLS failed" in res.stderr
        assert "CERTIFICATE_VERIFY_FAILED" in res.stderr
        res = dledger("status", "--peers", c.peers, "--tls-ca", str(pki.ca))
        assert res.stdout.splitlines()[1].split()[3] == "LEADER"
    finally:
        c.close()


def test_mutual_tls_names_the_missing_client_certificate_on_both_sides(pki: Pki, tmp_path: Path):
    tls = ["--tls-cert", str(pki.cert), "--tls-key", str(pki.key)]
    c = TestCluster(tmp_path, size=1, group="g", proxied=False, extra=[*tls, "--tls-ca", str(pki.ca)])
    try:
        c.start_all()
        res = dledger("status", "--peers", c.peers, "--tls-ca", str(pki.ca), check=False)
        assert res.returncode == 1 and "does it require a client certificate, mutual TLS?" in res.stderr
        # The member, which asyncio would leave silent, says why it closed the connection.
        log = c.logs["n0"]
        deadline = time.monotonic() + 10
        while "PEER_DID_NOT_RETURN_A_CERTIFICATE" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "a client without --tls-cert, and this member requires one" in log.read_text()
        res = dledger("status", "--peers", c.peers, "--tls-ca", str(pki.ca), *tls)
        assert res.stdout.splitlines()[1].split()[3] == "LEADER"
    finally:
        c.close()


def test_server_help_lists_every_option_with_its_default():
    import dataclasses

    from dledger.config import DLedgerConfig

    text = " ".join(dledger("server", "--help").stdout.split())  # argparse wraps lines
    for f in dataclasses.fields(DLedgerConfig):
        flag = "--" + f.name.replace("_", "-")
        assert flag in text, flag
        assert DLedgerConfig.help_of(f.name), f.name
    assert "--heart-beat-time-interval-ms N ms between the leader's heartbeats" in text
    assert "(default: 400)" in text and f"(default: {1024**3})" in text
    assert "--metrics-port N" in text
    # DLedger's camelCase spellings still work, unlisted.
    assert "--heartBeatTimeIntervalMs" not in text
    from dledger.cli import _config_from_args, build_parser

    args = build_parser().parse_args(["server", "--heartBeatTimeIntervalMs", "250", "--metrics-port", "9100"])
    cfg = _config_from_args(args)
    assert (cfg.heart_beat_time_interval_ms, cfg.metrics_port) == (250, 9100)


def test_no_leader_found_names_each_members_answer(tmp_path: Path):
    # One member of three up: it answers, but cannot be elected without a majority.
    c = TestCluster(tmp_path, group="g", proxied=False)
    try:
        c.start("n0")
        res = dledger("append", "--peers", c.peers, "--data", "x", "--timeout", "2", check=False)
        assert res.returncode == 2
        assert "no leader found within 2s" in res.stderr
        assert f"n0 (127.0.0.1:{c.ports['n0']}): NOT_LEADER" in res.stderr
        assert f"n1 (127.0.0.1:{c.ports['n1']}): connection refused" in res.stderr
    finally:
        c.close()


def test_a_member_that_answered_is_not_reported_silent_when_the_deadline_cuts_its_last_request(tmp_path: Path):
    # n0 answers NOT_LEADER, then freezes just before the client's deadline: the request in
    # flight when time runs out says nothing about n0, so the report keeps what n0 said.
    import os
    import signal
    import threading

    from dledger.client import Client
    from dledger.errors import DLedgerError

    c = TestCluster(tmp_path, group="g", proxied=False)
    try:
        c.start("n0")
        pid = c.procs["n0"].pid
        freeze = threading.Timer(1.0, os.kill, (pid, signal.SIGSTOP))
        with Client(c.peers, "g", timeout=1.6, request_timeout=10.0) as client:
            freeze.start()
            try:
                with pytest.raises(DLedgerError) as err:
                    client.append(b"x")
            finally:
                freeze.join()
                os.kill(pid, signal.SIGCONT)
        said = str(err.value)
        assert "no leader found within 1.6s" in said
        assert f"n0 (127.0.0.1:{c.ports['n0']}): NOT_LEADER" in said
    finally:
        c.close()


def test_progress_bar_is_optional(monkeypatch):
    # tqdm is an extra: on a terminal without it, long scans run silently rather than fail.
    import io

    from dledger import cli

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr(cli.sys, "stderr", err)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # what an absent package looks like to import
    update, close = cli._progress(100, "scan")
    update(10)
    close()
    assert err.getvalue() == ""


def test_bench_mq_figures_have_same_run_baselines():
    from dledger.perf.mq_bench import run_mq_bench

    rows = run_mq_bench(repeats=1, messages=4096)
    assert [r.name for r in rows] == [
        "put_classic_100B",
        "put_classic_1024B",
        "put_dledger_100B",
        "put_dledger_1024B",
        "dispatch_classic",
        "dispatch_dledger",
    ]
    assert all(r.value > 0 and r.baseline_value > 0 for r in rows)
    assert "mq" in dledger("bench", "--help").stdout


def test_the_cli_parser_does_not_load_numpy_or_the_message_store() -> None:
    # Every `dledger ...` invocation builds the whole parser, `mq` included: it must stay cheap.
    code = (
        "import sys, dledger.cli\n"
        "dledger.cli.build_parser()\n"
        "from dledger.rocketmq import Message\n"
        "heavy = {'numpy', 'dledger.rocketmq.store.message_store', 'dledger._ext.message'}\n"
        "loaded = sorted(heavy & set(sys.modules))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_help_says_what_each_command_and_option_is():
    top = dledger("--help").stdout
    assert "``" not in top and "Raft-replicated commitlog store" in top
    assert "--from INDEX" in dledger("dump", "--help").stdout
    assert "finishes in about ten seconds" in dledger("bench", "--help").stdout
    produce = dledger("mq", "produce", "--help").stdout
    assert "status, msg id, queue id, queue offset" in " ".join(produce.split())
    import argparse

    from dledger.cli import build_parser

    def undocumented(p: argparse.ArgumentParser, name: str) -> Iterator[str]:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, sp in action.choices.items():
                    yield from undocumented(sp, f"{name} {sub}")
            elif action.help is None:
                yield f"{name} {'/'.join(action.option_strings) or action.dest}"

    assert list(undocumented(build_parser(), "dledger")) == []


def test_verify_and_dump_on_a_store_root_point_at_the_node_directory(tmp_path: Path):
    dledger("append", str(tmp_path / "dledger-n0"), "--data", "x")
    for command in ("verify", "dump"):
        res = dledger(command, str(tmp_path), check=False)
        assert res.returncode == 2 and res.stderr.rstrip().endswith(
            "point at the dledger-<id> directory (here: dledger-n0)"
        ), res.stderr


def test_mq_produce_json_names_its_fields(tmp_path: Path):
    out = dledger("mq", "produce", str(tmp_path / "s"), "--topic", "T", "--stdin", "--json", stdin="a\nb\n").stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["status"], r["queue_id"], r["queue_offset"]) for r in rows] == [("PUT_OK", 0, 0), ("PUT_OK", 0, 1)]
    assert rows[0]["phys_offset"] == 0 and rows[1]["phys_offset"] > 0 and len(rows[0]["msg_id"]) == 32
