"""The infra tests' own helpers."""

from __future__ import annotations

import pytest

from tests.infra.helpers import identity_statements_of_role, statements


def test_statement_helpers_refuse_a_template_without_statements() -> None:
    # What keeps every loop over statements in the security tests from passing on an empty stack.
    with pytest.raises(AssertionError, match="no identity policy statement"):
        statements({"Resources": {}}, "identity")
    with pytest.raises(AssertionError, match="no identity policy statement"):
        identity_statements_of_role({"Resources": {}}, "Role")
