"""`sidecar-debug certs`: generate, inspect and verify certificates; drive the `self` mode Secret.

generate  CA + serving certificate files for running the webhook outside a cluster
inspect   subject, SANs, issuer, validity, days left and key type of PEM files
verify    check a serving certificate against a CA bundle for a name
ensure    `self` mode once: create/renew the Secret and write the caBundle (e.g. from a Job)
rotate    `self` mode: force a serving certificate renewal (and/or start a CA roll)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from webhook.certs import pki, rotation, tls
from webhook.commands import output

DEFAULT_OUT = "certs"


def default_out_dir(start: Path | None = None) -> Path:
    """certs/ at the root of the sidecar-debug checkout when run inside one, else ./certs."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / "pyproject.toml").is_file() and (directory / "webhook").is_dir():
            return directory / DEFAULT_OUT
    return here / DEFAULT_OUT


def _load_existing_ca(out: Path) -> tuple[pki.KeyPair | None, str]:
    """The CA in `out` when it can sign (its certificate and key match, it is a CA and has a
    day left); else None and why not ("" when there is no ca.key)."""
    ca_crt, ca_key = out / pki.KEY_CA_CRT, out / pki.KEY_CA_KEY
    if not ca_key.exists():
        return None, ""
    try:
        cert = pki.load_certificates(ca_crt.read_bytes())[0]
        key = pki.load_private_key(ca_key.read_bytes())
    except (OSError, pki.CertificateError) as error:
        return None, f"{getattr(error, 'strerror', None) or error}"
    if not pki.key_matches(cert, key):
        return None, f"{ca_key.name} does not belong to {ca_crt.name}"
    if not pki.is_ca(cert):
        return None, f"{ca_crt.name} is not a CA certificate"
    if pki.days_left(cert) < 1:
        return None, f"{ca_crt.name} expires within a day"
    return pki.KeyPair(cert, key), ""


def _existing_key(path: Path) -> tuple[pki.PrivateKey | None, str]:
    """The serving key in `path` to keep, or None and why it cannot be kept."""
    try:
        key = pki.load_private_key(path.read_bytes())
    except (OSError, pki.CertificateError) as error:
        return None, f"{getattr(error, 'strerror', None) or error}"
    if not isinstance(key, pki.PrivateKey):
        return None, f"a {pki.key_description(key.public_key())} key cannot serve TLS here"
    return key, ""


def _names(args: argparse.Namespace) -> list[str]:
    """The SANs, each checked (pki.CertificateError names the flag and what is allowed)."""
    for flag, value in (("--service", args.service), ("--namespace", args.namespace)):
        if not pki.dns_label(value):
            raise _Usage(f"{flag} {value[:100]!r} is not a Kubernetes name (a DNS-1123 label: "
                         "lower-case letters, digits and '-', 1 to 63 characters, starting "
                         "and ending with a letter or digit)")
    domain = args.cluster_domain.strip(".")
    if domain and not pki.is_dns_name(domain):
        raise _Usage(f"--cluster-domain {args.cluster_domain[:100]!r} is not a DNS name "
                     "(e.g. cluster.local)")
    names = pki.service_dns_names(args.service, args.namespace, args.cluster_domain)
    for flag, values in (("--dns", args.dns or []), ("--ip", args.ip or [])):
        for value in values:
            if flag == "--ip" and not pki.is_ip(value):
                raise _Usage(f"--ip {value[:100]!r} is not an IP address (e.g. 10.0.0.7, ::1)")
            try:
                pki.check_name(value)
            except pki.CertificateError as error:
                raise _Usage(f"--dns {error}") from None
    extras = list(args.dns or []) + list(args.ip or [])
    if not args.no_localhost:
        extras += ["localhost", "127.0.0.1"]
    return names + [n for n in dict.fromkeys(extras) if n not in names]


class _Usage(ValueError):
    """A flag's value the command refuses (exit 2, one line)."""


def cmd_generate(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else default_out_dir()
    try:
        names = _names(args)
    except _Usage as error:
        print(f"sidecar-debug certs generate: {error}", file=sys.stderr)
        return 2
    # Keys are kept: a key another program or a Secret holds is never replaced unasked.
    refusals: list[str] = []
    ca, ca_problem = (None, "") if args.new_ca else _load_existing_ca(out)
    ca_key_file = out / pki.KEY_CA_KEY
    if ca is None and ca_key_file.exists() and not args.force:
        why = "--new-ca asks for a new CA" if args.new_ca else f"it cannot sign: {ca_problem}"
        refusals.append(f"{ca_key_file} exists and would be replaced ({why})")
    serving_key: pki.PrivateKey | None = None
    tls_key_file = out / pki.KEY_TLS_KEY
    if tls_key_file.exists() and not args.force:
        serving_key, key_problem = _existing_key(tls_key_file)
        if serving_key is None:
            refusals.append(f"{tls_key_file} exists and cannot be kept ({key_problem})")
    if refusals:
        for refusal in refusals:
            print(f"sidecar-debug certs generate: {refusal}", file=sys.stderr)
        print("sidecar-debug certs generate: nothing written; --force replaces existing keys "
              "(or choose another --out)", file=sys.stderr)
        return 2
    reused = ca is not None
    if ca is None:
        ca = pki.generate_ca(validity=dt.timedelta(days=args.ca_days))
    serving = pki.generate_serving(ca, names, dt.timedelta(days=args.days), key=serving_key)
    written = tls.write_bundle(out, ca, serving, write_ca_key=True)
    readme = out / "README.md"
    if not args.out and not readme.exists():
        readme.write_text(README_TEXT)
    print(f"{'reused' if reused else 'new'} CA {ca.cert.subject.rfc4514_string()}")
    print(f"serving certificate for {', '.join(names)}; valid {args.days} days"
          + ("; key kept" if serving_key is not None else "; new key"))
    for name in sorted(written):
        print(f"wrote {written[name]}")
    return 0


def _print_cert(cert: Any, label: str) -> None:
    info = pki.describe(cert)
    print(label)
    print(f"  subject:    {info['subject']}")
    print(f"  SANs:       {', '.join(info['sans']) or '-'}")
    print(f"  issuer:     {info['issuer']}")
    print(f"  CA:         {'yes' if info['isCA'] else 'no'}")
    print(f"  not before: {info['notBefore']}")
    print(f"  not after:  {info['notAfter']}")
    print(f"  days left:  {info['daysLeft']:.1f}{'  (EXPIRED)' if info['daysLeft'] < 0 else ''}")
    print(f"  key type:   {info['keyType']}")
    print(f"  serial:     {info['serial']}")
    print(f"  sha256:     {info['sha256']}")


def fetch_served_certificates(address: str, server_name: str | None) -> list[Any]:
    """The certificate chain a TLS server presents (no verification: this is for looking)."""
    import socket
    import ssl

    from cryptography import x509

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise pki.CertificateError(f"--connect wants HOST:PORT, got {address!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host.strip("[]"), int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=server_name or host.strip("[]")) as sock:
            der = sock.getpeercert(binary_form=True)
    if der is None:
        raise pki.CertificateError(f"{address} presented no certificate")
    return [x509.load_der_x509_certificate(der)]


def _emit(args: argparse.Namespace, kind: str, **fields: Any) -> None:
    """One inspected file or address as a document: a JSON line, or a YAML document."""
    document = output.document(kind, **fields)
    if args.output == "json":
        print(json.dumps(document, ensure_ascii=False))
    else:
        print("---\n" + output.dumps(document, "yaml"), end="")


def cmd_inspect(args: argparse.Namespace) -> int:
    status = 0
    text = args.output == "text"
    if args.connect:
        try:
            found = fetch_served_certificates(args.connect, args.server_name)
        except (OSError, pki.CertificateError) as exc:
            print(f"{args.connect}: {exc}", file=sys.stderr)
            return 1
        if not text:
            _emit(args, "Certificates", address=args.connect,
                  certificates=[pki.describe(c) for c in found])
        else:
            _print_cert(found[0], f"{args.connect} (served):")
    elif not args.files:
        args.parser.error("give a FILE or --connect HOST:PORT")
    for name in args.files:
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            print(f"sidecar-debug: {name}: {exc.strerror}", file=sys.stderr)
            status = 2  # cannot be read: as every command's input (webhook.commands.errors)
            continue
        if b"PRIVATE KEY-----" in data and b"CERTIFICATE-----" not in data:
            try:
                key = pki.load_private_key(data)
            except pki.CertificateError as exc:
                print(f"{name}: {exc}", file=sys.stderr)
                status = 2
                continue
            if not text:
                _emit(args, "PrivateKey", file=name, keyType=pki.key_description(key))
            else:
                print(f"{name}: private key, {pki.key_description(key)}")
            continue
        try:
            found = pki.load_certificates(data)
        except pki.CertificateError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            status = 2
            continue
        if not text:
            _emit(args, "Certificates", file=name,
                  certificates=[pki.describe(c) for c in found])
            continue
        for index, cert in enumerate(found):
            suffix = f" [{index + 1}/{len(found)}]" if len(found) > 1 else ""
            _print_cert(cert, f"{name}{suffix}:")
    return status


def cmd_verify(args: argparse.Namespace) -> int:
    try:
        cas = pki.load_certificates(Path(args.ca).read_bytes())
        leaf = pki.load_certificates(Path(args.cert).read_bytes())[0]
        if args.key:
            key = pki.load_private_key(Path(args.key).read_bytes())
            if not pki.key_matches(leaf, key):
                raise pki.CertificateError(f"{args.key} does not belong to {args.cert}")
        names: list[str] = args.name or pki.subject_alt_names(leaf)[:1]
        if not names:
            raise pki.CertificateError(f"{args.cert} has no subjectAltName; pass --name")
        for name in names:
            pki.verify_chain(leaf, cas, name)
    except pki.CertificateError as exc:  # an unreadable file: webhook.commands.errors
        print(f"FAIL: {exc}", file=sys.stderr)
        if args.output != "text":
            output.emit(output.document("CertificateVerification", valid=False, cert=args.cert,
                                        ca=args.ca, names=args.name or [], problem=str(exc)),
                        args.output)
        return 1
    if args.output != "text":
        output.emit(output.document("CertificateVerification", valid=True, cert=args.cert,
                                    ca=args.ca, names=names, problem=""), args.output)
        return 0
    print(f"OK: {args.cert} verifies against {args.ca} for {', '.join(names)}")
    return 0


def _manager(args: argparse.Namespace) -> rotation.SelfManager:
    from webhook.config import load_settings

    settings = load_settings(
        args.config,
        overrides={
            "webhook_namespace": args.namespace,
            "certificates_secret": args.secret,
            "service_name": args.service,
            "webhook_configuration": args.webhook_configuration,
            "cluster_domain": args.cluster_domain,
        },
    )
    return rotation.SelfManager.from_settings(settings)


def _summary(state: rotation.TLSState) -> str:
    lines = [
        f"signing CA: {state.signer.cert.subject.rfc4514_string()} "
        f"({pki.days_left(state.signer.cert):.0f} days left)",
        f"serving:    {', '.join(pki.subject_alt_names(state.serving.cert))} "
        f"({pki.days_left(state.serving.cert):.1f} days left, "
        f"renews {pki.renewal_time(state.serving.cert).isoformat()})",
        f"bundle:     {len(state.bundle)} CA(s)",
    ]
    if state.next_ca is not None:
        lines.append(f"next CA:    {state.next_ca.cert.subject.rfc4514_string()}")
    return "\n".join(lines)


def _create_empty_secret(manager: rotation.SelfManager) -> bool:
    """Create the empty Secret the chart creates at install, when it is missing (a cluster
    without the chart, or a deleted Secret). The CLI runs with the user's credentials; the
    webhook itself has no `create` on secrets. True when it was created here."""
    if manager.store.read_secret(manager.namespace, manager.secret_name) is not None:
        return False
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from webhook.kube.client import api_client

    body = rotation.empty_secret(manager.namespace, manager.secret_name)
    core: Any = client.CoreV1Api(api_client())  # plain dicts in, as webhook.kube.secrets does
    try:
        core.create_namespaced_secret(manager.namespace, body)
    except ApiException as exc:
        if exc.status == 409:  # created meanwhile (the chart, another `ensure`): fill theirs
            return False
        raise
    return True


def cmd_ensure(args: argparse.Namespace) -> int:
    manager = _manager(args)
    if _create_empty_secret(manager):
        print(f"Secret {manager.namespace}/{manager.secret_name}: created (empty)")
    state, reasons = manager.ensure()
    patched = manager.reconcile_ca_bundle(state.bundle_pem)
    print(f"Secret {manager.namespace}/{manager.secret_name}: {'; '.join(reasons) or 'up to date'}")
    print(f"caBundle written in: {', '.join(patched) or 'nothing (already current or absent)'}")
    print(_summary(state))
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    if not (args.force or args.ca):
        print("refusing to rotate without --force (serving certificate) or --ca", file=sys.stderr)
        return 2
    manager = _manager(args)
    state, reasons = manager.ensure(force_serving=args.force, force_ca=args.ca)
    manager.reconcile_ca_bundle(state.bundle_pem)
    print(f"Secret {manager.namespace}/{manager.secret_name}: {'; '.join(reasons) or 'unchanged'}")
    print(_summary(state))
    return 0


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="settings file (else SIDECAR_DEBUG_CONFIG / defaults)")
    parser.add_argument("--namespace", "-n", help="the webhook's namespace (webhookNamespace)")
    parser.add_argument("--secret", help="the TLS Secret name (certificatesSecret)")
    parser.add_argument("--service", help="the webhook's Service name (serviceName)")
    parser.add_argument("--webhook-configuration", help="webhook configuration name")
    parser.add_argument("--cluster-domain", help="cluster DNS domain (clusterDomain)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this module's subcommands; each sets `func(args) -> int` as its default."""
    parser = subparsers.add_parser("certs", help="generate, inspect and manage TLS certificates")
    sub = parser.add_subparsers(dest="certs_command", metavar="SUBCOMMAND", required=True)

    gen = sub.add_parser("generate", help="write ca.crt, ca.key, tls.crt, tls.key for local use")
    gen.add_argument("--service", required=True, help="Service name of the webhook")
    gen.add_argument("--namespace", required=True, help="namespace of the Service")
    gen.add_argument("--out", help="output folder (default: certs/ at the repository root)")
    gen.add_argument("--days", type=int, default=365, help="serving certificate validity (365)")
    gen.add_argument("--ca-days", type=int, default=3650, help="CA validity for a new CA (3650)")
    gen.add_argument("--cluster-domain", default="cluster.local", help="(cluster.local)")
    gen.add_argument("--dns", action="append", help="extra DNS SAN (repeatable)")
    gen.add_argument("--ip", action="append", help="extra IP SAN (repeatable)")
    gen.add_argument("--no-localhost", action="store_true",
                     help="leave out the localhost and 127.0.0.1 SANs")  # fmt: skip
    gen.add_argument("--new-ca", action="store_true",
                     help="make a new CA even when DIR already holds a usable one (with "
                     "--force when DIR has a ca.key)")  # fmt: skip
    gen.add_argument("--force", action="store_true",
                     help="replace existing keys: a new serving key, and a new CA where "
                     "ca.key cannot sign (default: keys in DIR are kept; refused if unusable)")
    gen.set_defaults(func=cmd_generate)

    ins = sub.add_parser("inspect", help="print subject, SANs, issuer, validity of PEM files")
    ins.add_argument("files", nargs="*", metavar="FILE")
    ins.add_argument("--connect", metavar="HOST:PORT",
                     help="also show the certificate a running server presents")  # fmt: skip
    ins.add_argument("--server-name", help="SNI name to send with --connect")
    output.add_output(ins, json_alias=True)  # -o json: one JSON line per file
    ins.set_defaults(func=cmd_inspect, parser=ins)

    ver = sub.add_parser("verify", help="verify a serving certificate against a CA bundle")
    ver.add_argument("--ca", required=True, help="CA bundle (PEM)")
    ver.add_argument("--cert", required=True, help="serving certificate (PEM)")
    ver.add_argument("--key", help="also check that this key belongs to the certificate")
    ver.add_argument("--name", action="append", help="name to verify for (repeatable)")
    output.add_output(ver)
    ver.set_defaults(func=cmd_verify)

    ens = sub.add_parser("ensure", help="self mode: fill/renew the Secret, write the caBundle")
    _cluster_flags(ens)
    ens.set_defaults(func=cmd_ensure)

    rot = sub.add_parser("rotate", help="self mode: force a renewal through the Secret")
    _cluster_flags(rot)
    rot.add_argument("--force", action="store_true", help="renew the serving certificate now")
    rot.add_argument("--ca", action="store_true",
                     help="start a CA roll now (promoted after the overlap)")  # fmt: skip
    rot.set_defaults(func=cmd_rotate)


README_TEXT = """\
# certs/ (git-ignored)

Local development certificates land here; only this README is committed.

`sidecar-debug certs generate --service NAME --namespace NS [--days N]` writes:

| file      | what                                                          | mode |
|-----------|---------------------------------------------------------------|------|
| `ca.crt`  | the development CA (what the apiserver needs as `caBundle`)   | 0644 |
| `ca.key`  | the CA's key, reused by the next `generate`                   | 0600 |
| `tls.crt` | the serving certificate (SANs below), ECDSA P-256             | 0644 |
| `tls.key` | its key, kept by the next `generate` (new with `--force`)     | 0600 |

Existing keys are never replaced unasked: `--force` makes a new serving key (and a new CA where
`ca.key` cannot sign); `--new-ca --force` a new CA.

SANs: NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local (`--cluster-domain`), plus
localhost and 127.0.0.1 (`--no-localhost` leaves them out; `--dns`/`--ip` add more).

Serve with them: `sidecar-debug serve --tls-cert-file certs/tls.crt --tls-key-file certs/tls.key`.
Look at them: `sidecar-debug certs inspect certs/tls.crt`. More: docs/certificates.md.
"""
