"""HTTP concerns shared by the API-facing functions: error mapping, the caller's principal, body limits."""
