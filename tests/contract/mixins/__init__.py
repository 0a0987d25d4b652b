"""One contract mixin per port, in the manner of Haystack's `haystack/testing/document_store.py`.

Each mixin holds the tests every adapter of its port must pass and names one fixture it needs (`blobs`,
`store`, `cache`, `jobs`, `query_log`, `secrets`, `index`): a fresh, empty adapter. An adapter's suite is a
`Test*` class that subclasses the mixin and provides that fixture (see `tests/contract/test_*.py`); its
adapter-specific tests are methods of the same class. So adding an adapter means adding one subclass.

The mixins' names do not start with `Test`, so pytest runs them only through their subclasses. Their asserts are
rewritten like a test module's (`tests/contract/conftest.py` registers this package).
"""
