"""What an http probe may reach (probes.reach): the implicit loopback set, and the
matching of ``[http] allow`` entries against tricky URLs.  Pure: no network."""

from __future__ import annotations

import pytest

from probes.reach import Origin, origin_problem, parse_origin, refusal, url_problem

ALLOW = ["https://app.example.com", "http://127.0.0.2:8080", "https://cdn.example.com/v2", "https://[2001:db8::1]"]


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/", "https://localhost:8443/x", "http://127.0.0.1:9/", "http://[::1]:80/",
        "http://LOCALHOST./", "http://[0:0:0:0:0:0:0:1]/",  # case, trailing dot, IPv6 by value
    ],
)
def test_localhost_127_0_0_1_and_ipv6_loopback_need_no_listing(url):
    assert refusal(url, []) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.2/", "http://127.1.2.3/", "http://app.localhost/", "http://[::ffff:127.0.0.1]/",
        "http://2130706433/", "http://0x7f000001/", "http://10.0.0.1/", "https://example.com/",
    ],
)
def test_every_other_address_or_name_needs_listing(url):
    why = refusal(url, [])
    assert why is not None and "[http] allow" in why and "loopback" in why


@pytest.mark.parametrize(
    "url",
    [
        "https://app.example.com/", "https://app.example.com", "https://APP.Example.COM/deploy_info",
        "https://app.example.com./x", "https://app.example.com:443/x", "https://app.example.com/a?b=c#d",
        "http://127.0.0.2:8080/health", "https://cdn.example.com/v2", "https://cdn.example.com/v2/app.js",
        "https://[2001:db8:0::1]/", "https://[2001:DB8::1]:443/x",
    ],
)
def test_urls_under_an_entry_are_allowed(url):
    assert refusal(url, ALLOW) is None


@pytest.mark.parametrize(
    "url, said",
    [
        ("https://app.example.com@evil.com/", "credentials"),  # the host is evil.com
        ("https://user:pw@app.example.com/", "credentials"),
        ("https://app.example.com\\@evil.com/", "backslash"),
        ("https://app.example.com /", "whitespace"),
        ("https://app.exa\tmple.com/", "whitespace"),
        ("http://app.example.com/", "allow"),  # another scheme
        ("https://app.example.com:8443/", "allow"),  # another port
        ("http://127.0.0.2/", "allow"),  # the entry has port 8080
        ("http://127.0.0.2:8081/", "allow"),
        ("https://app.example.com.evil.com/", "allow"),
        ("https://evil.com/app.example.com", "allow"),
        ("https://xapp.example.com/", "allow"),
        ("https://cdn.example.com/v2x/app.js", "allow"),  # a prefix by whole segments
        ("https://cdn.example.com/", "allow"),
        ("https://cdn.example.com/v2/../admin", "'..'"),
        ("https://cdn.example.com/v2/%2e%2e/admin", "'..'"),
        ("https://cdn.example.com/V2/app.js", "allow"),  # paths are case-sensitive
        ("https://[2001:db8::2]/", "allow"),
        ("https://app.example.com../", "empty label"),
        ("https://bücher.example/", "ASCII"),
        ("ftp://app.example.com/", "http"),
        ("https:///path", "host"),
        ("https://app.example.com:99999/", "Port"),
        ("http://[::1/", "IPv6"),
    ],
)
def test_tricky_urls_are_refused_with_the_reason(url, said):
    why = refusal(url, ALLOW)
    assert why is not None and said in why, why


def test_the_refusal_says_what_to_list():
    assert 'allow = ["https://example.org:8443"]' in refusal("https://example.org:8443/x", [])
    assert 'allow = ["http://[2001:db8::5]"]' in refusal("http://[2001:db8::5]/", [])


def test_entries_are_normalised_and_checked():
    assert parse_origin("HTTPS://App.Example.com./api/") == Origin("https", "app.example.com", 443, "/api")
    assert parse_origin("http://127.0.0.2:8080") == Origin("http", "127.0.0.2", 8080, "")
    assert parse_origin("https://[2001:DB8:0::1]:8443/") == Origin("https", "2001:db8::1", 8443, "")
    for bad, said in [
        ("https://a.example/?x=1", "without ?"), ("https://a.example/#f", "without ?"), ("ftp://a.example", "http"),
        ("https://u@a.example", "credentials"), ("https://a.example/x/../y", "'..'"), ("app.example.com", "http"),
    ]:
        problem = origin_problem(bad)
        assert problem is not None and said in problem, (bad, problem)
    assert origin_problem("https://app.example.com/v1/") is None


def test_a_bad_entry_matches_nothing():
    assert refusal("https://a.example/", ["https://a.example/?q"]) is not None


def test_url_problem_is_about_form_not_the_list():
    assert url_problem("https://anything.example/") is None
    assert "credentials" in url_problem("https://a@b.example/")


def test_the_http_table_is_checked_when_lockstep_toml_is_loaded():
    import msgspec

    from probes.config import ConfigError, parse_config

    config = parse_config('[http]\nallow = ["https://app.example.com"]\nca = "certs/ca.pem"\nmax_body = "32MiB"\n'
                          '[[probe]]\nname = "site"\nkind = "http"\nurl = "https://app.example.com/deploy_info"\n')
    reach = config.http.reach("/repo")
    assert reach.allow == ["https://app.example.com"] and type(reach.allow[0]) is str
    assert reach.ca == "/repo/certs/ca.pem" and reach.max_body == 32 * 2**20
    msgspec.json.encode(reach)  # it travels in a spec's params
    for text, said in [
        ('[http]\nallow = ["https://u@app.example.com"]', "[http] key 'allow'"),
        ('[http]\nallow = ["app.example.com"]', "not an http:// or https://"),
        ('[http]\nca = "/etc/ca.pem"', "[http] key 'ca'"),
        ('[http]\nalow = []', "unknown key 'alow'"),
        ('[[probe]]\nname = "s"\nkind = "http"\nurl = "https://app.example.com/"', "[[probe]] #1 key 'url'"),
        ('[http]\nallow = ["https://app.example.com"]\n[[probe]]\nname = "s"\nkind = "consistency"\n'
         'sources = ["https://app.example.com/a", "https://evil.example/a"]', "[[probe]] #1 key 'sources'"),
    ]:
        with pytest.raises(ConfigError, match=None) as caught:
            parse_config(text)
        assert said in caught.value.message, (text, caught.value.message)
