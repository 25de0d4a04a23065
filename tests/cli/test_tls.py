"""TLS settings without a running cluster: where clients find the CA file, what `corral up --tls` plans and
makes, and the controller's and agent's refusals of unusable TLS files."""
from __future__ import annotations

import datetime
import json
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from corral.agent.__main__ import main as agent_main
from corral.cli.config import resolve_target, write_cluster_file
from corral.cli.hostinfo import HostFacts
from corral.cli.up_plan import UpOptions, plan_up
from corral.controller.__main__ import main as controller_main
from corral.slurm.common import target as slurm_target
from corral.tls_certs import CertificateAuthority, cluster_tls, subject_alt_names

NO_GPUS = HostFacts(cpus=8, mem_mib=64000, nvml_gpus=None)


def test_ca_file_from_env_or_the_cluster_json_of_that_url(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    secret = tmp_path / "secret"
    secret.write_text("s\n")
    path = write_cluster_file("https://head:6817", secret, env, ca_file=tmp_path / "ca.pem")
    assert json.loads(path.read_text())["ca_file"] == str(tmp_path / "ca.pem")
    assert resolve_target(None, env).ca_file == str(tmp_path / "ca.pem")
    assert resolve_target("https://other:1", env).ca_file is None  # that CA vouches for its own cluster only
    assert resolve_target("https://other:1", {**env, "CORRAL_CA_FILE": "/x.pem"}).ca_file == "/x.pem"
    assert slurm_target.resolve_target({**env, "CORRAL_CA_FILE": "/y.pem"}).ca_file == "/y.pem"
    assert slurm_target.resolve_target(env).ca_file == str(tmp_path / "ca.pem")


def test_up_plan_with_tls(tmp_path):
    plan = plan_up(UpOptions(state_dir=tmp_path, host="0.0.0.0", port=7000, tls=True), NO_GPUS, python="py")
    assert plan.url == "https://127.0.0.1:7000" and plan.ca_file == tmp_path / "tls" / "ca.pem"
    controller = plan.controller_argv
    assert controller[controller.index("--tls-cert") + 1] == str(tmp_path / "tls" / "controller.pem")
    assert controller[controller.index("--tls-key") + 1] == str(tmp_path / "tls" / "controller.key")
    for argv in plan.agent_argvs:
        assert argv[argv.index("--ca-file") + 1] == str(plan.ca_file)
        assert argv[argv.index("--controller") + 1] == "https://127.0.0.1:7000"
    plain = plan_up(UpOptions(state_dir=tmp_path), NO_GPUS, python="py")
    assert plain.url.startswith("http://") and plain.ca_file is None
    assert "--tls-cert" not in plain.controller_argv and "--ca-file" not in plain.agent_argvs[0]


def test_cluster_tls_keeps_the_ca_and_renews_the_certificate(tmp_path):
    tls = tmp_path / "tls"
    files = tls / "ca.pem", tls / "controller.pem", tls / "controller.key"
    cluster_tls(*files, ["localhost", "127.0.0.1", "0.0.0.0", "head.example.org", "[::1]", "127.0.0.1"])
    assert stat.S_IMODE(tls.stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) & 0o077 for p in tls.iterdir()} == {
        "ca.pem": 0o044, "ca.key": 0, "controller.pem": 0o044, "controller.key": 0}
    ca = x509.load_pem_x509_certificate(files[0].read_bytes())
    cert = x509.load_pem_x509_certificate(files[1].read_bytes())
    assert cert.issuer == ca.subject
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "head.example.org"]
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]  # no 0.0.0.0
    lifetime = ca.not_valid_after_utc - ca.not_valid_before_utc
    assert datetime.timedelta(days=365) <= lifetime <= datetime.timedelta(days=366)
    cluster_tls(*files, ["localhost"])
    assert files[0].read_bytes() == ca.public_bytes(Encoding.PEM)  # the same CA
    assert x509.load_pem_x509_certificate(files[1].read_bytes()).serial_number != cert.serial_number


def test_an_expiring_ca_is_replaced(tmp_path):
    old = CertificateAuthority.create(now=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=350))
    old.save(tmp_path / "ca.pem", tmp_path / "ca.key")
    cluster_tls(tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key", ["localhost"])
    assert x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes()).serial_number != old.cert.serial_number


def test_subject_alt_names_need_a_name():
    assert subject_alt_names(["", "::", "0.0.0.0"]) == []


def test_controller_refuses_unusable_tls_files(tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text("s")
    base = ["--listen", "127.0.0.1:1", "--secret-file", str(secret), "--state-dir", str(tmp_path)]
    assert controller_main([*base, "--tls-cert", str(tmp_path / "c.pem")]) == 2
    assert "corral-controller: error: --tls-cert and --tls-key go together" in capsys.readouterr().err
    assert controller_main([*base, "--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k")]) == 2
    assert "cannot read the TLS certificate or key" in capsys.readouterr().err
    one, other = CertificateAuthority.create(), CertificateAuthority.create()
    one.save(tmp_path / "one.pem", tmp_path / "one.key")
    other.save(tmp_path / "other.pem", tmp_path / "other.key")
    assert controller_main([*base, "--tls-cert", str(tmp_path / "one.pem"), "--tls-key",
                            str(tmp_path / "other.key")]) == 2
    assert "cannot be used together" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "message"), [(None, "cannot read the CA file"),
                                                  ("not a certificate", "holds no usable PEM certificate")])
def test_agent_refuses_an_unusable_ca_file(tmp_path, capsys, content, message):
    secret, ca_file = tmp_path / "secret", tmp_path / "ca.pem"
    secret.write_text("s")
    if content is not None:
        ca_file.write_text(content)
    with pytest.raises(SystemExit) as exited:
        agent_main(["--controller", "https://127.0.0.1:1", "--secret-file", str(secret), "--node", "n1",
                    "--ca-file", str(ca_file), "--gpus", "0"])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_tls_certs_command_for_a_controller_host(tmp_path, capsys):
    from corral.tls_certs import main

    assert main([str(tmp_path / "tls"), "head.example.org", "10.0.0.1"]) == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "tls" / "controller.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["head.example.org"]
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.1"]
    assert main([str(tmp_path / "tls"), "0.0.0.0"]) == 1
    assert "needs at least one host name or address" in capsys.readouterr().err


def test_roots_system_cluster_file_names_a_world_readable_copy_of_the_ca(tmp_path):
    """Root's `corral up --tls` keeps its CA in its private state dir: the host's users verify the
    controller with the copy the system-wide cluster.json names, and both go when the cluster stops."""
    from corral.cli.config import remove_system_cluster_file, write_system_cluster_file

    ca = tmp_path / "state" / "tls" / "ca.pem"
    ca.parent.mkdir(parents=True)
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    ca.chmod(0o600)
    env = {"CORRAL_SYSTEM_CLUSTER_FILE": str(tmp_path / "etc" / "cluster.json"), "HOME": str(tmp_path / "home"),
           "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"), "CORRAL_TOKEN": "ct1.1.x"}
    url = "https://127.0.0.1:6817"
    path = write_system_cluster_file(url, tmp_path / "auth.sock", env, ca_file=ca)
    public = Path(json.loads(path.read_text())["ca_file"])
    assert public.read_bytes() == ca.read_bytes() and stat.S_IMODE(public.stat().st_mode) == 0o644
    assert resolve_target(None, env).ca_file == str(public)
    remove_system_cluster_file(path, url)
    assert not path.exists() and not public.exists()
