"""One bounded GET (probes.fetch): redirects judged by the allow list hop by hop, TLS
verified, time and size bounded.  Real servers on loopback (threads), real sockets."""

from __future__ import annotations

import socket
import ssl
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from probes.fetch import MAX_REDIRECTS, fetch
from probes.model import ENDPOINT_FAILING, PASS, ProbeSpec
from probes.reach import Reach

from ...http_site import self_signed as make_certificate
from ...http_site import serve, stop
from .test_probes_builtin import run_direct


@pytest.fixture
def servers() -> Iterator[list]:
    started: list[ThreadingHTTPServer] = []

    def start(host: str, routes: dict, tls: ssl.SSLContext | None = None) -> str:
        server = serve(host, routes, tls)
        started.append(server)
        return f"{'https' if tls else 'http'}://{host}:{server.server_address[1]}"

    yield start
    for server in started:
        stop(server)


def test_a_redirect_is_followed_only_to_a_listed_or_loopback_url(servers):
    remote: dict = {"/bundle.js": (200, {}, b"console.log(1)")}
    far = servers("127.0.0.2", remote)
    local: dict = {"/new": (200, {}, b"here"), "/moved": (302, {"Location": "/new"}, b"")}
    near = servers("127.0.0.1", local)
    local["/away"] = (301, {"Location": f"{far}/bundle.js"}, b"")
    here = fetch(f"{near}/moved", Reach(), 10)
    assert (here.status, here.body, here.redirects) == (200, b"here", [f"{near}/new"])
    refused = fetch(f"{near}/away", Reach(), 10)
    assert refused.status == 301 and refused.refused == f"{far}/bundle.js"
    assert f"redirected to {far}/bundle.js, which is not followed" in refused.error and "[http] allow" in refused.error
    listed = fetch(f"{near}/away", Reach(allow=[far]), 10)
    assert (listed.status, listed.body) == (200, b"console.log(1)")
    assert fetch(f"{near}/moved", Reach(), 10, follow=False).status == 302


def test_a_redirect_loop_stops(servers):
    routes: dict = {"/loop": (302, {"Location": "/loop"}, b"")}
    url = servers("127.0.0.1", routes)
    got = fetch(f"{url}/loop", Reach(), 10)
    assert got.status == 302 and len(got.redirects) == MAX_REDIRECTS and "more than" in got.error


def test_the_http_probe_names_a_refused_redirect(servers):
    far = servers("127.0.0.2", {"/": (200, {}, b"x")})
    near = servers("127.0.0.1", {"/go": (302, {"Location": f"{far}/"}, b"")})
    result = run_direct(ProbeSpec(name="site", kind="http", params={"url": f"{near}/go"}, timeout=10))
    assert result.finding == ENDPOINT_FAILING and f"redirected to {far}/" in result.reason
    assert result.details["redirect"] == f"{far}/" and result.details["status"] == 302
    reach = {"allow": [far]}
    assert run_direct(ProbeSpec(name="site", kind="http", params={"url": f"{near}/go", "reach": reach}, timeout=10)).verdict == PASS


def test_a_body_over_max_body_is_cut_and_marked(servers, tmp_path):
    url = servers("127.0.0.1", {"/big": (200, {}, b"a" * (3 * 2**20))})
    got = fetch(f"{url}/big", Reach(max_body=2**20), 10)
    assert got.truncated and len(got.body) == 2**20
    artifact = tmp_path / "bundle.js"
    artifact.write_bytes(b"a" * (3 * 2**20))
    result = run_direct(ProbeSpec(name="big", kind="http", params={"url": f"{url}/big", "expect_hash_of": str(artifact), "reach": {"max_body": 2**20}}, timeout=10))
    assert result.finding == "deploy hash mismatch" and "larger than [http] max_body" in result.reason


def test_a_server_that_never_answers_is_bounded_by_the_total():
    with socket.socket() as listener:  # accepts connections (the backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        got = fetch(f"http://127.0.0.1:{listener.getsockname()[1]}/", Reach(connect_timeout=5), 0.5)
    assert got.status is None and ("timed out" in got.error or "within" in got.error)


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a self-signed certificate for 127.0.0.1, and that
    certificate's file (to trust it as its own CA)."""
    cert, key = make_certificate(tmp_path, "cert", "127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


def test_tls_is_verified_and_a_ca_can_be_trusted(servers, self_signed):
    context, cert = self_signed
    url = servers("127.0.0.1", {"/health": (200, {}, b"ok")}, tls=context) + "/health"
    untrusted = run_direct(ProbeSpec(name="tls", kind="http", params={"url": url}, timeout=10))
    assert untrusted.finding == ENDPOINT_FAILING and "TLS verification failed" in untrusted.reason
    assert "certificate" in untrusted.reason and "is the service running" not in untrusted.reason
    trusted = run_direct(ProbeSpec(name="tls", kind="http", params={"url": url, "reach": {"ca": str(cert)}}, timeout=10))
    assert trusted.verdict == PASS, trusted.reason


def test_the_deploy_an_http_probe_saw_is_in_its_details(servers, tmp_path):
    import hashlib
    import json

    artifact = tmp_path / "app.js"
    artifact.write_bytes(b"bundle v1")
    full = hashlib.sha256(b"bundle v1").hexdigest()
    routes = {
        "/app.js": (200, {}, b"bundle v1"),
        "/info-short": (200, {}, json.dumps({"hash": "SHA256:" + full[:10].upper()}).encode()),
        "/info-other": (200, {}, json.dumps({"hash": "0123456789abcdef"}).encode()),
        "/down": (503, {}, b"bundle v1"),
    }
    url = servers("127.0.0.1", routes)

    def seen(path: str, **params):
        spec = ProbeSpec(name="site", kind="http", params={"url": url + path, **params}, cwd=str(tmp_path), timeout=10)
        return run_direct(spec).details.get("deploy")

    assert seen("/app.js", deploy=True) == {"url": url + "/app.js", "hash": full, "size": 9}
    assert seen("/app.js") is None  # not a deploy probe
    # a prefix of the artifact's hash: recorded with the full hash and the artifact's size
    assert seen("/info-short", json_path="$.hash", expect_hash_of="app.js") == {"url": url + "/info-short", "hash": full, "size": 9}
    # another build: recorded as served, size unknown (and the probe says deploy hash mismatch)
    assert seen("/info-other", json_path="$.hash", expect_hash_of="app.js") == {"url": url + "/info-other", "hash": "0123456789abcdef", "size": None}
    assert seen("/down", deploy=True) is None  # an error page is no deploy
