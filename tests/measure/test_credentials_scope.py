"""A URL's credentials go to that URL's origin only, and are never recorded.

The attack: ``tally measure --url http://op:pw@A --metrics-url http://B/metrics`` used to
send ``Authorization: Basic op:pw`` to B on every scrape. Two real HTTP servers on
127.0.0.1 (``hostile.py``) record every header they receive.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger.errors import FormatError
from ledger.keys import Signer
from ledger.store import Ledger
from runner.drivers.site import site_from_dict
from runner.measure import measure_wave, synthetic_family
from runner.measure.urls import OriginAuth, origin, server_url
from runner.measure.wave import served_models

from .hostile import Handler, Hostile, chunk, serve

A_SECRET = "pw-A-9f3k"
B_SECRET = "pw-B-q7zx"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Serving(Handler):
    """An OpenAI-compatible server (models, streamed completions, /metrics) that takes anyone."""

    def get_metrics(self) -> None:
        self.send_body(200, b"vllm:generation_tokens_total 5\n", "text/plain")

    def post(self, body: dict[str, Any]) -> None:
        self.sse_headers()
        self.wfile.write(b"".join(chunk(i, last=i == 2) for i in range(3)) + b"data: [DONE]\n\n")
        self.wfile.flush()


def authorizations(server: Hostile) -> list[str | None]:
    return [headers.get("authorization") for _, _, headers in server.seen]


def with_user(url: str, user: str, password: str) -> str:
    return url.replace("http://", f"http://{user}:{password}@")


def test_url_credentials_are_not_sent_to_another_host(family_file: Path) -> None:
    with serve(Serving) as a, serve(Serving) as b:
        result = CliRunner().invoke(app, ["measure", "--url", with_user(a.url, "op", A_SECRET), "--metrics-url",
                                          f"{b.url}/metrics", "--family", str(family_file), "--max-tokens", "3",
                                          "--json"])
        seen_a, seen_b = authorizations(a), authorizations(b)
        paths_b = [path for _, path, _ in b.seen]
    assert result.exit_code == 0, result.stderr
    assert seen_a and set(seen_a) == {basic("op", A_SECRET)}           # every request to A carries A's
    assert paths_b == ["/metrics", "/metrics"] and seen_b == [None, None]  # B was scraped, without any
    assert A_SECRET not in result.stdout + result.stderr


def test_each_url_gets_its_own_credentials(family_file: Path, tmp_path: Path, ledger: Ledger, root: Signer) -> None:
    key = tmp_path / "root.pem"
    key.write_bytes(root.private_pem())
    key.chmod(0o600)
    out = tmp_path / "out"
    with serve(Serving) as a, serve(Serving) as b:
        result = CliRunner().invoke(app, ["--db", ledger.url, "--key", str(key), "measure",
                                          "--url", with_user(a.url, "op", A_SECRET),
                                          "--metrics-url", with_user(f"{b.url}/metrics", "scraper", B_SECRET),
                                          "--family", str(family_file), "--max-tokens", "3", "--ledger",
                                          "--id", "two-hosts", "--out", str(out)])
        seen_a, seen_b = authorizations(a), authorizations(b)
    assert result.exit_code == 0, result.stderr
    assert seen_a and set(seen_a) == {basic("op", A_SECRET)}
    assert seen_b == [basic("scraper", B_SECRET)] * 2
    # neither secret (nor a user name) in anything tally printed, wrote or signed
    forbidden = (A_SECRET, B_SECRET, "scraper", basic("op", A_SECRET)[6:], basic("scraper", B_SECRET)[6:])
    for text in (result.stdout, result.stderr):
        assert not any(word in text for word in forbidden)
    for path in out.iterdir():
        data = path.read_bytes()
        assert not any(word.encode() in data for word in forbidden)
    (event,) = [e for e in ledger.events() if e.type == "wave.measured"]
    assert event.payload["measure"]["metrics_url"] == f"{b.url}/metrics"
    blob = ledger.blob(event.payload["records"]["blob"].removeprefix("sha256:"))
    assert blob is not None
    db = Path(ledger.url.removeprefix("sqlite:///")).read_bytes()
    for word in forbidden:
        assert word not in event.line() and word.encode() not in blob.data and word.encode() not in db


def test_a_metrics_url_of_the_same_origin_gets_the_servers_credentials(family_file: Path) -> None:
    with serve(Serving) as a:
        result = CliRunner().invoke(app, ["measure", "--url", with_user(a.url, "op", A_SECRET), "--metrics-url",
                                          f"{a.url}/metrics", "--family", str(family_file), "--max-tokens", "3"])
        seen = list(a.seen)
    assert result.exit_code == 0, result.stderr
    assert {path for _, path, _ in seen} == {"/v1/models", "/metrics", "/v1/completions"}
    assert {headers.get("authorization") for _, _, headers in seen} == {basic("op", A_SECRET)}


def test_two_credentials_for_one_origin_are_refused(family_file: Path) -> None:
    result = CliRunner().invoke(app, ["measure", "--url", f"http://op:{A_SECRET}@127.0.0.1:9", "--metrics-url",
                                      f"http://other:{B_SECRET}@127.0.0.1:9/metrics", "--family", str(family_file)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["tally: two URLs of http://127.0.0.1:9 carry different "
                                                  "credentials: give them once"]


def test_origin_auth_matches_scheme_host_and_port() -> None:
    auth = OriginAuth(server_url(f"http://op:{A_SECRET}@Example.org"), server_url("http://plain.example:81"))
    assert origin("http://example.org/v1") == origin("http://EXAMPLE.org:80/x") == "http://example.org:80"

    def sent(url: str) -> str | None:
        request = httpx.Request("GET", url)
        return next(auth.auth_flow(request)).headers.get("authorization")

    assert sent("http://example.org:80/metrics") == basic("op", A_SECRET)
    for elsewhere in ("https://example.org/metrics", "http://example.org:8080/", "http://example.org.evil/",
                      "http://plain.example:81/", "http://127.0.0.1/"):
        assert sent(elsewhere) is None, elsewhere


def test_the_library_refuses_urls_that_carry_credentials() -> None:
    family = synthetic_family("opinions", short=1, long=0)
    with pytest.raises(FormatError, match=r"the server URL 'http://\*\*\*@127\.0\.0\.1:9' carries credentials") as info:
        measure_wave(f"http://op:{A_SECRET}@127.0.0.1:9", None, family, model="m", max_tokens=1, seed=1)
    assert A_SECRET not in str(info.value)
    with pytest.raises(FormatError, match="the metrics URL") as info:
        measure_wave("http://127.0.0.1:9", f"http://op:{A_SECRET}@127.0.0.1:9/metrics", family, model="m",
                     max_tokens=1, seed=1)
    assert A_SECRET not in str(info.value)
    with pytest.raises(FormatError, match="carries credentials") as info:
        served_models(f"http://op:{A_SECRET}@127.0.0.1:9")
    assert A_SECRET not in str(info.value)


@pytest.mark.parametrize("field", ["serving_url", "metrics_urls"])
def test_a_site_url_with_credentials_is_refused_without_echoing_them(field: str, tmp_path: Path) -> None:
    url = f"http://op:{A_SECRET}@127.0.0.1:8000"
    endpoints: dict[str, Any] = {"serving_url": "http://127.0.0.1:8000"}
    endpoints[field] = [url + "/metrics"] if field == "metrics_urls" else url
    data = {"kind": "commands", "production_clock_cap_mhz": 2300, "hosts": [{"name": "h", "role": "head"}],
            "endpoints": endpoints, "actions": {}}
    with pytest.raises(FormatError, match="carries credentials") as info:
        site_from_dict(data, base_dir=tmp_path, check_programs=False)
    assert A_SECRET not in str(info.value) and "op:" not in str(info.value)
    with pytest.raises(FormatError, match="carries credentials") as info:
        site_from_dict({"kind": "sim", "url": url}, base_dir=tmp_path)
    assert A_SECRET not in str(info.value)


def test_a_malformed_site_url_does_not_echo_its_credentials(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="must be an http") as info:
        site_from_dict({"kind": "sim", "url": f"http://op:{A_SECRET}@ho st:1"}, base_dir=tmp_path)
    assert A_SECRET not in str(info.value)


def test_credentials_of_an_unreachable_metrics_url_appear_in_no_message(family_file: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    out = tmp_path / "out"
    with serve(Serving) as a:
        result = CliRunner().invoke(app, ["measure", "--url", with_user(a.url, "op", A_SECRET), "--metrics-url",
                                          f"http://scraper:{B_SECRET}@127.0.0.1:{dead}/metrics", "--family",
                                          str(family_file), "--max-tokens", "3", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert any(f"http://127.0.0.1:{dead}/metrics" in why for why in summary["wave"]["incomplete_reasons"])
    for text in (result.stdout, result.stderr, *(p.read_text() for p in out.iterdir())):
        assert B_SECRET not in text and A_SECRET not in text and "scraper" not in text
