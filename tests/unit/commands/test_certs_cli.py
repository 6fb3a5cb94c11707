"""`sidecar-debug certs generate|inspect|verify` through the real entry point."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.certs import pki
from webhook.commands import certs as certs_cli
from webhook.commands.cli import main


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generate_writes_files_with_private_key_modes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    rc = main(["certs", "generate", "--service", "hook", "--namespace", "dbg",
               "--out", str(out), "--days", "30", "--cluster-domain", "k8s.example"])  # fmt: skip
    assert rc == 0
    assert {p.name for p in out.iterdir()} == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert _mode(out / "tls.key") == 0o600 and _mode(out / "ca.key") == 0o600
    assert _mode(out / "tls.crt") == 0o644
    leaf = pki.load_certificates((out / "tls.crt").read_bytes())[0]
    ca = pki.load_certificates((out / "ca.crt").read_bytes())
    assert pki.subject_alt_names(leaf) == [
        "hook", "hook.dbg", "hook.dbg.svc", "hook.dbg.svc.k8s.example", "localhost", "127.0.0.1",
    ]  # fmt: skip
    assert 29.9 < pki.days_left(leaf) <= 30
    pki.verify_chain(leaf, ca, "hook.dbg.svc")
    assert pki.key_matches(leaf, pki.load_private_key((out / "tls.key").read_bytes()))
    assert "wrote" in capsys.readouterr().out


def test_generate_again_reuses_the_ca_unless_asked(tmp_path: Path) -> None:
    args = ["certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]
    assert main(args) == 0
    first_ca = (tmp_path / "ca.crt").read_bytes()
    first_leaf = (tmp_path / "tls.crt").read_bytes()
    assert main([*args, "--no-localhost"]) == 0
    assert (tmp_path / "ca.crt").read_bytes() == first_ca
    assert (tmp_path / "tls.crt").read_bytes() != first_leaf
    leaf = pki.load_certificates((tmp_path / "tls.crt").read_bytes())[0]
    assert "127.0.0.1" not in pki.subject_alt_names(leaf)
    assert main([*args, "--new-ca"]) == 2  # it would replace ca.key: only with --force
    assert (tmp_path / "ca.crt").read_bytes() == first_ca
    assert main([*args, "--new-ca", "--force"]) == 0
    assert (tmp_path / "ca.crt").read_bytes() != first_ca


def test_generate_keeps_an_existing_serving_key_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]
    assert main(args) == 0
    key = (tmp_path / "tls.key").read_bytes()
    assert main([*args, "--days", "10"]) == 0
    assert (tmp_path / "tls.key").read_bytes() == key  # a new certificate for the same key
    leaf = pki.load_certificates((tmp_path / "tls.crt").read_bytes())[0]
    assert pki.key_matches(leaf, pki.load_private_key(key)) and pki.days_left(leaf) <= 10
    assert "key kept" in capsys.readouterr().out
    assert main([*args, "--force"]) == 0
    assert (tmp_path / "tls.key").read_bytes() != key
    assert "new key" in capsys.readouterr().out


@pytest.mark.parametrize("broken", ["tls.key", "ca.key"])
def test_generate_refuses_to_replace_an_unusable_key_without_force(
    tmp_path: Path, broken: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]
    (tmp_path / broken).write_text("not a key\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / broken} exists" in err and "--force replaces existing keys" in err
    assert (tmp_path / broken).read_text() == "not a key\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [broken]  # nothing written
    assert main([*args, "--force"]) == 0
    pki.load_private_key((tmp_path / broken).read_bytes())


@pytest.mark.parametrize(("flags", "message"), [
    (["--dns", "Bad_Name!"], "--dns 'Bad_Name!' is neither a DNS name nor an IP address"),
    (["--dns", "UPPER.example"], "--dns 'UPPER.example' is neither a DNS name"),
    (["--dns", "a..b"], "--dns 'a..b' is neither"),
    (["--dns", "-lead.example"], "--dns '-lead.example' is neither"),
    (["--dns", "x" * 64 + ".example"], "is neither a DNS name"),
    (["--ip", "10.0.0.300"], "--ip '10.0.0.300' is not an IP address"),
    (["--ip", "example.com"], "--ip 'example.com' is not an IP address"),
    (["--service", "Hook"], "--service 'Hook' is not a Kubernetes name (a DNS-1123 label"),
    (["--namespace", "a.b"], "--namespace 'a.b' is not a Kubernetes name"),
    (["--cluster-domain", "bad_domain"], "--cluster-domain 'bad_domain' is not a DNS name"),
])
def test_generate_refuses_names_a_certificate_cannot_carry(
    tmp_path: Path, flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {"--service": "s", "--namespace": "n"}
    args.update(dict(zip(flags[::2], flags[1::2], strict=True)))
    argv = ["certs", "generate", "--out", str(tmp_path / "out")]
    for flag, value in args.items():
        argv.append(f"{flag}={value}")  # a value may start with '-'

    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_generate_takes_wildcards_ips_and_ipv6(tmp_path: Path) -> None:
    assert main(["certs", "generate", "--service", "s", "--namespace", "n", "--out",
                 str(tmp_path), "--dns", "*.dev.example", "--dns", "web-1.example",
                 "--ip", "::1", "--ip", "10.0.0.7"]) == 0
    leaf = pki.load_certificates((tmp_path / "tls.crt").read_bytes())[0]
    assert {"*.dev.example", "web-1.example", "::1", "10.0.0.7"} <= set(
        pki.subject_alt_names(leaf))


def test_check_name_guards_every_serving_certificate() -> None:
    ca = pki.generate_ca()
    with pytest.raises(pki.CertificateError, match="neither a DNS name nor an IP address"):
        pki.generate_serving(ca, ["ok.example", "Bad_Name!"])


def test_default_out_dir_is_the_repository_certs_folder(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    assert certs_cli.default_out_dir(repo / "tests" / "unit") == repo / "certs"
    assert certs_cli.default_out_dir(tmp_path) == tmp_path / "certs"


def test_inspect_prints_the_facts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)])
    capsys.readouterr()
    assert main(["certs", "inspect", str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")]) == 0
    text = capsys.readouterr().out
    for expected in ("subject:    CN=s", "SANs:       s, s.n, s.n.svc, s.n.svc.cluster.local",
                     "issuer:     O=sidecar-debug,CN=sidecar-debug-ca@", "not before:",
                     "not after:", "days left:  365.0", "key type:   ECDSA secp256r1",
                     "tls.key: private key, ECDSA secp256r1"):  # fmt: skip
        assert expected in text
    assert main(["certs", "inspect", "--json", str(tmp_path / "ca.crt")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["certificates"][0]["isCA"] is True


def test_inspect_bad_input_fails_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("hello")
    assert main(["certs", "inspect", str(junk), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "junk.pem: not a PEM certificate bundle" in err and "missing" in err


def test_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)])
    base = ["certs", "verify", "--ca", str(tmp_path / "ca.crt"),
            "--cert", str(tmp_path / "tls.crt")]  # fmt: skip
    assert main([*base, "--key", str(tmp_path / "tls.key"), "--name", "s.n.svc"]) == 0
    assert main([*base, "--name", "other.n.svc"]) == 1
    assert main([*base, "--key", str(tmp_path / "ca.key")]) == 1
    assert "does not belong" in capsys.readouterr().err


def test_console_script_generate(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("sidecar-debug")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "webhook.commands.cli"]
    done = subprocess.run(
        [*cmd, "certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _mode(tmp_path / "tls.key") == 0o600


def test_inspect_connect_shows_the_served_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket
    import ssl
    import threading

    main(["certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_once() -> None:
        conn, _ = listener.accept()
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (OSError, ssl.SSLError):
            pass

    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    capsys.readouterr()
    try:
        rc = main(["certs", "inspect", "--connect", f"127.0.0.1:{port}", "--server-name", "s.n"])
    finally:
        thread.join(10)
        listener.close()
    assert rc == 0
    out = capsys.readouterr().out
    assert f"127.0.0.1:{port} (served):" in out and "SANs:       s, s.n" in out
    assert main(["certs", "inspect", "--connect", "nonsense"]) == 1
