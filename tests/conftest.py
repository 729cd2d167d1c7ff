"""Shared fixtures. Integration tests get one real control plane per test session (see
tests/integration/conftest.py); unit tests need nothing."""
