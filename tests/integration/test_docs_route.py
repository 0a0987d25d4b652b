"""/docs through the API function, as API Gateway calls it: keyless, under a stage prefix."""

import pytest

from tests.integration.test_console_route import get, header

pytestmark = pytest.mark.integration


def test_the_docs_page_links_its_files_under_the_stage_and_serves_them_locked_down(local_container):
    # Given API Gateway's keyless event under /prod / When the page is asked for
    page = get("/docs")
    # Then its files are linked relative to it (so /prod/docs/...) and served by the same function
    assert page["statusCode"] == 200 and 'src="docs/swagger-ui-bundle.js"' in page["body"]
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "start.js"):
        served = get(f"/docs/{name}")
        assert served["statusCode"] == 200, name
        assert "script-src 'self';" in header(served, "Content-Security-Policy")
        assert header(served, "X-Frame-Options") == "DENY" and header(served, "X-Content-Type-Options") == "nosniff"
    # And the start script reads the OpenAPI document relative to the page, and sends "Try it out" there
    start = get("/docs/start.js")["body"]
    assert 'new URL("v1/openapi.json", base)' in start and "spec.servers" in start


def test_the_docs_are_not_part_of_the_api_description(local_container):
    document = get("/v1/openapi.json")
    assert document["statusCode"] == 200 and '"/docs' not in document["body"]
