"""HTTPS on the listener: the S3 endpoint and the admin API answer over TLS only, and a
SIGHUP swaps the certificate for new connections without a restart."""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import boto3
import httpx
import pytest
from botocore.config import Config

from tests.support import ADMIN, REGION, GatewayProcess
from tests.waiting import wait_for

TOKEN = "tls-admin-token"


def https_client(port: int, ca: Path):  # type: ignore[no-untyped-def]
    return boto3.client("s3", endpoint_url=f"https://127.0.0.1:{port}", region_name=REGION, verify=str(ca),
                        aws_access_key_id=ADMIN[0], aws_secret_access_key=ADMIN[1],
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def make_certificate(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def served_certificate(port: int) -> str:
    return ssl.DER_cert_to_PEM_cert(ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port))))


def same_certificate(a: str, b: str) -> bool:
    return ssl.PEM_cert_to_DER_cert(a) == ssl.PEM_cert_to_DER_cert(b)


@pytest.fixture
def tls_gateway(origin_endpoint, tmp_path):  # type: ignore[no-untyped-def]
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates: apt-get install openssl")
    live_cert, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    first = make_certificate(tmp_path, "first")
    live_cert.write_bytes(first[0].read_bytes())
    live_key.write_bytes(first[1].read_bytes())
    gateway = GatewayProcess(origin_endpoint, scheme="https", GATEWAY_SERVER_TLS_CERT_FILE=str(live_cert),
                             GATEWAY_SERVER_TLS_KEY_FILE=str(live_key), GATEWAY_ADMIN_TOKEN=TOKEN)
    gateway.start(ready=lambda: served_certificate(gateway.port))
    yield gateway, gateway.port, tmp_path, (live_cert, live_key), first
    gateway.stop()


def test_s3_and_admin_over_https_only(tls_gateway):
    _, port, _, _, (first_cert, _) = tls_gateway
    s3 = https_client(port, first_cert)
    s3.create_bucket(Bucket="tls-bucket")
    s3.put_object(Bucket="tls-bucket", Key="k", Body=b"over tls")
    assert s3.get_object(Bucket="tls-bucket", Key="k")["Body"].read() == b"over tls"
    admin = httpx.get(f"https://127.0.0.1:{port}/_gateway/stats", verify=str(first_cert),
                      headers={"authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert admin.status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/_gateway/healthz", timeout=5)  # no plain HTTP on a TLS port
    # A client willing to speak TLS 1.1 (and weak ciphers) is refused by the server itself.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.minimum_version, context.maximum_version = ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"https://127.0.0.1:{port}/_gateway/healthz", verify=context, timeout=5)


def test_sighup_reloads_the_certificate_and_bad_files_keep_the_old_one(tls_gateway):
    gateway, port, folder, (live_cert, live_key), (first_cert, _) = tls_gateway
    proc = gateway.proc
    assert same_certificate(served_certificate(port), first_cert.read_text())
    second_cert, second_key = make_certificate(folder, "second")
    live_cert.write_bytes(second_cert.read_bytes())
    live_key.write_bytes(second_key.read_bytes())
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: same_certificate(served_certificate(port), second_cert.read_text()), "the new certificate served",
             within=10, interval=0.1)
    live_cert.write_text("not a certificate")
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: any("TLS certificate not reloaded" in line for line in gateway.printed()),
             "the gateway says it kept the certificate", within=10)
    assert proc.poll() is None
    assert same_certificate(served_certificate(port), second_cert.read_text())
    s3 = https_client(port, second_cert)
    assert "Buckets" in s3.list_buckets()


def test_a_certificate_that_does_not_load_is_one_line(tmp_path, origin_endpoint):
    (tmp_path / "bad.pem").write_text("garbage")
    env = dict(os.environ, GATEWAY_ORIGIN_ENDPOINT=origin_endpoint, GATEWAY_SERVER_PORT="0",
               GATEWAY_SERVER_TLS_CERT_FILE=str(tmp_path / "bad.pem"), GATEWAY_SERVER_TLS_KEY_FILE=str(tmp_path / "bad.pem"))
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "serve"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "tls_cert_file / tls_key_file do not load" in result.stderr
    only_one = dict(env, GATEWAY_SERVER_TLS_KEY_FILE="")
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "serve"], env=only_one, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1 and "set both, or neither" in result.stderr
