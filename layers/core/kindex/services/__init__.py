"""Services: the use cases. They speak domain models and ports only; no SDK, no environment."""
