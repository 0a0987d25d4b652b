"""Rights-check request building and response parsing: every doubt denies."""

import hashlib
import hmac
import json

import pytest

from kindex.domain.models import Collection
from kindex.services.rights import (
    ExternalRights,
    PublicRights,
    build_rights_request,
    parse_rights_response,
    rights_checker_for,
    sign,
)

pytestmark = pytest.mark.unit


def test_request_body_and_signature():
    body, headers = build_rights_request("ann", "c1", ["a", "b"], b"secret", 1700000000)
    assert json.loads(body) == {"document_ids": ["a", "b"], "username": "ann", "xwiki_username": "ann", "collection": "c1"}
    expected = hmac.new(b"secret", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert headers == {"Content-Type": "application/json", "X-Kindex-Signature": f"t=1700000000,v1={expected}"}
    assert sign(b"other", body, 1700000000) != headers["X-Kindex-Signature"]


@pytest.mark.parametrize("status, payload, allowed", [
    (200, b'{"a": true, "b": false}', {"a"}),
    (200, b'{"a": true}', {"a"}),                       # b missing -> denied
    (200, b'{"a": "true", "b": 1}', set()),             # non-booleans deny
    (200, b'["a", "b"]', set()),                        # not an object
    (200, b"not json", set()),
    (200, b"\xff\xfe", set()),
    (500, b'{"a": true, "b": true}', set()),            # any non-200 denies, whatever the body says
    (201, b'{"a": true, "b": true}', set()),
    (200, b'{"a": true, "b": true, "zzz": true}', {"a", "b"}),  # unknown ids are ignored
])
def test_response_parsing_fails_closed(status, payload, allowed):
    assert parse_rights_response(status, payload, ["a", "b"]) == allowed


def test_registry_builds_checkers_and_unknown_methods_deny():
    public = Collection(id="c", embedding_model="hash:8")
    assert isinstance(rights_checker_for(public, None), PublicRights)
    external = Collection(id="c", embedding_model="hash:8", rights_check_method="external",
                          rights_check_method_configuration={"url": "http://127.0.0.1:9/x", "timeout": 3})
    checker = rights_checker_for(external, b"s")
    assert isinstance(checker, ExternalRights) and checker.timeout == 3
    bogus = public.model_copy(update={"rights_check_method": "plugin-that-is-not-installed"})
    assert rights_checker_for(bogus, None).allowed("u", "c", ["a"]) == set()


def test_unreachable_endpoint_denies_quickly():
    checker = ExternalRights("http://127.0.0.1:9/unreachable", b"s", timeout=1)
    assert checker.allowed("u", "c", ["a", "b"]) == set()
