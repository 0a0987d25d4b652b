"""The rights-check URL policy: the SSRF list of issue 10, on AWS and in local mode, and the allowlist setting."""

import ipaddress

import pytest

from kindex.domain.rights_policy import (
    LOCAL_DEFAULT_NETWORKS,
    RightsUrlPolicy,
    UrlRefused,
    parse_networks,
    parse_rights_url,
)
from kindex.settings import SettingsError, load_settings

pytestmark = pytest.mark.unit

AWS = RightsUrlPolicy.for_backend("aws", None)
LOCAL = RightsUrlPolicy.for_backend("local", None)
LOCAL_V4_LOOPBACK_ONLY = RightsUrlPolicy.for_backend("local", parse_networks("127.0.0.0/8"))
EVERYTHING_ADMITTED = RightsUrlPolicy.for_backend("aws", parse_networks("0.0.0.0/0,::/0"))

# (url, rule) refused by every policy above, however permissive its allowlist
REFUSED_EVERYWHERE = [
    ("https://169.254.169.254/latest/meta-data/", "never"),
    ("https://169.254.170.2/v2/credentials", "never"),  # ECS task credentials
    ("https://[fd00:ec2::254]/latest/meta-data/", "never"),  # IMDS over IPv6 (inside fc00::/7)
    ("https://[fe80::1]/", "never"),
    ("https://[::ffff:169.254.169.254]/", "never"),  # IPv4-mapped link-local
    ("https://[::ffff:a9fe:a9fe]/", "never"),
    ("https://[64:ff9b::a9fe:a9fe]/", "never"),  # NAT64 of the metadata address
    ("https://[2002:a9fe:a9fe::1]/", "never"),  # 6to4 carrying it
    ("https://192.0.0.192/", "never"),  # Oracle Cloud metadata
    ("https://100.100.100.200/", "never"),  # Alibaba Cloud metadata
    ("https://0.0.0.0/", "never"),
    ("https://0.1.2.3/", "never"),
    ("https://[::]/", "never"),
    ("https://224.0.0.1/", "never"),
    ("https://[ff02::1]/", "never"),
    ("https://240.0.0.1/", "never"),
    ("https://255.255.255.255/", "never"),
    ("https://[::127.0.0.1]/", "never"),  # IPv4-compatible (deprecated, reserved)
    ("https://[fec0::1]/", "never"),  # site-local (deprecated)
    ("https://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("https://METADATA.google.internal./computeMetadata/v1/", "metadata"),
    ("https://metadata/", "metadata"),
    ("https://instance-data.ec2.internal/", "metadata"),
    ("https://0x7f000001/", "host"),
    ("https://2130706433/", "host"),
    ("https://0177.0.0.1/", "host"),
    ("https://127.1/", "host"),
    ("https://0x7f.0.0.1/", "host"),
    ("https://1.2.3.4.5/", "host"),
    ("https://[fe80::1%25eth0]/", "host"),  # zone index
    ("https://[127.0.0.1]/", "host"),
    ("https://[::1/", "host"),
    ("https://::1/", "host"),
    ("https:///check", "host"),
    ("https://rights.example:99999/check", "port"),
    ("https://rights.example:0/check", "port"),
    ("https://rights.example:/check", "port"),
    ("https://rights.example:+443/check", "port"),
    ("https://rights.example:443x/check", "port"),
    ("https://rights.example/a b", "characters"),
    ("https://rights.example/check\r\nX-Injected: 1", "characters"),
    ("https://rights.example/check\n", "characters"),
    ("https://rights\t.example/", "characters"),
    ("https://rights.example/\x00", "characters"),
    ("https://rïghts.example/", "characters"),
    ("https://evil.example\\@127.0.0.1/", "characters"),
    ("https://user:secret@rights.example/check", "credentials"),
    ("https://@rights.example/check", "credentials"),
    ("https://rights.example@169.254.169.254/", "credentials"),
    ("ftp://rights.example/", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("https:/rights.example/check", "scheme"),
    ("//rights.example/check", "scheme"),
    ("not a url", "characters"),
    ("", "scheme"),
    (None, "scheme"),
    (5, "scheme"),
    ("https://" + "a" * 2100 + ".example/", "length"),
    ("https://" + "a" * 64 + ".example/", "host"),
    ("https://-rights.example/", "host"),
    ("https://rights%2eexample/", "host"),
]


@pytest.mark.parametrize("url, rule", REFUSED_EVERYWHERE)
@pytest.mark.parametrize("policy", [AWS, LOCAL, EVERYTHING_ADMITTED], ids=["aws", "local", "everything-admitted"])
def test_ssrf_list_is_refused_by_every_deployment(policy, url, rule):
    with pytest.raises(UrlRefused) as refused:
        policy.check_url(url)
    # Then the refusal names its rule and the field
    assert refused.value.rule == rule
    assert str(refused.value).startswith("rights_check_method_configuration.url: ")


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://127.0.0.1:8080/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://[fd12:3456::1]/",
        "http://198.18.0.1/",
        "http://[2002:7f00:1::]/",
        "http://localhost:9000/",
        "http://rights.localhost/",
    ],
)
def test_private_and_loopback_need_the_allowlist(url):
    # Given a local deployment admitting IPv4 loopback only (AWS admits nothing private by default)
    for policy in (LOCAL_V4_LOOPBACK_ONLY, AWS):
        https = url.replace("http://", "https://")
        admitted = policy is LOCAL_V4_LOOPBACK_ONLY and any(
            marker in url for marker in ("127.0.0.1", "localhost", "2002:7f00:1::")
        )
        if admitted:
            assert policy.check_url(url).port in (80, 8080, 9000)
        else:
            with pytest.raises(UrlRefused) as refused:
                policy.check_url(https)
            assert refused.value.rule == "not-admitted"
            assert "KINDEX_RIGHTS_ALLOWED_NETWORKS" in str(refused.value)


def test_local_default_admits_both_loopbacks_and_http():
    assert LOCAL.allowed_networks == LOCAL_DEFAULT_NETWORKS
    assert LOCAL.check_url("http://[::1]:8080/check").host == "::1"
    assert LOCAL.check_url("http://127.0.0.1:8080/check").address == ipaddress.ip_address("127.0.0.1")
    with pytest.raises(UrlRefused, match="private") as refused:
        LOCAL.check_url("http://10.0.0.1/")
    assert refused.value.rule == "not-admitted"


def test_aws_is_https_only():
    with pytest.raises(UrlRefused, match="must use https") as refused:
        AWS.check_url("http://rights.example.com/check")
    assert refused.value.rule == "scheme"
    assert AWS.check_url("https://rights.example.com/check").scheme == "https"


def test_an_allowlist_admits_private_networks_but_never_metadata():
    # Given an AWS deployment admitting its VPC (IPv4 and IPv6 ULA)
    policy = RightsUrlPolicy.for_backend("aws", parse_networks("10.0.0.0/8, fc00::/7"))
    assert policy.check_url("https://10.1.2.3/check").host == "10.1.2.3"
    assert policy.check_url("https://[fd12::1]/check").host == "fd12::1"
    with pytest.raises(UrlRefused):
        policy.check_url("https://172.16.0.1/check")
    # Then the IMDS address inside fc00::/7 stays refused
    with pytest.raises(UrlRefused) as refused:
        policy.check_url("https://[fd00:ec2::254]/")
    assert refused.value.rule == "never"


@pytest.mark.parametrize(
    "url, scheme, host, port, target, host_header",
    [
        (
            "https://Rights.Example.COM./check?a=1&b=2#frag",
            "https",
            "rights.example.com",
            443,
            "/check?a=1&b=2",
            "rights.example.com",
        ),
        ("HTTPS://rights.example:8443", "https", "rights.example", 8443, "/", "rights.example:8443"),
        ("https://[2606:4700:0::1]:8443/x", "https", "2606:4700::1", 8443, "/x", "[2606:4700::1]:8443"),
        ("https://8.8.8.8/x", "https", "8.8.8.8", 443, "/x", "8.8.8.8"),
        ("https://xn--rghts-3ra.example/x", "https", "xn--rghts-3ra.example", 443, "/x", "xn--rghts-3ra.example"),
        (
            "https://rights_check.internal.example/x",
            "https",
            "rights_check.internal.example",
            443,
            "/x",
            "rights_check.internal.example",
        ),
    ],
)
def test_accepted_urls_are_parsed_to_one_canonical_form(url, scheme, host, port, target, host_header):
    parsed = AWS.check_url(url)
    assert (parsed.scheme, parsed.host, parsed.port, parsed.target, parsed.host_header) == (
        scheme,
        host,
        port,
        target,
        host_header,
    )
    assert parse_rights_url(url) == parsed


@pytest.mark.parametrize(
    "address, allowed",
    [
        ("8.8.8.8", True),
        ("2606:4700::1", True),
        ("127.0.0.1", True),
        ("127.5.6.7", True),
        ("::1", False),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("169.254.169.254", False),
        ("fe80::1%eth0", False),
        ("fd00:ec2::254", False),
        ("0.0.0.0", False),
        ("::ffff:169.254.169.254", False),
        ("64:ff9b::808:808", True),
        ("64:ff9b::a00:1", False),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # Teredo, client 192.0.2.45
    ],
)
def test_resolved_addresses_are_judged_one_by_one(address, allowed):
    if allowed:
        LOCAL_V4_LOOPBACK_ONLY.check_address(address)
    else:
        with pytest.raises(UrlRefused):
            LOCAL_V4_LOOPBACK_ONLY.check_address(address)


def test_allowed_networks_setting_is_validated_at_cold_start():
    assert load_settings({}).rights_networks is None
    assert load_settings({"KINDEX_RIGHTS_ALLOWED_NETWORKS": "none"}).rights_networks == ()
    networks = load_settings({"KINDEX_RIGHTS_ALLOWED_NETWORKS": "10.0.0.0/8, fd00::/8,127.0.0.1"}).rights_networks
    assert networks == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/8"),
        ipaddress.ip_network("127.0.0.1/32"),
    )
    for bad in ("10.0.0.0/33", "localhost", "10.0.0.0/8;rm", "300.1.1.1/8"):
        with pytest.raises(SettingsError, match="KINDEX_RIGHTS_ALLOWED_NETWORKS"):
            load_settings({"KINDEX_RIGHTS_ALLOWED_NETWORKS": bad})
    # Unset on AWS means nothing private; unset locally means loopback
    assert RightsUrlPolicy.for_backend("aws", None).allowed_networks == ()
    assert RightsUrlPolicy.for_backend("local", ()).allowed_networks == ()
