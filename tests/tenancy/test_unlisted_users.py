"""Users without a [[users]] entry: refused with an error that says how to let them in, or put in the
tenancy's default_account."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.api.tenancy import TenancySpec
from corral.engine.tenancy import Tenancy, TenancyError

ACCOUNTS = [{"name": "lab"}, {"name": "vision", "parent": "lab"}]
USERS = [{"name": "alice", "accounts": ["vision"]}]


def test_the_lock_out_error_says_how_to_fix_it() -> None:
    tenancy = Tenancy(TenancySpec(accounts=ACCOUNTS, users=USERS))
    with pytest.raises(TenancyError) as caught:
        tenancy.resolve("root", None, None, None)
    message = str(caught.value)
    assert message.startswith("user 'root' has no association with any account")
    assert "[[users]]" in message and "name = \"root\"" in message and 'accounts = ["lab"]' in message
    assert "default_account" in message and "corral tenancy apply" in message


def test_default_account_takes_users_without_an_entry() -> None:
    tenancy = Tenancy(TenancySpec(accounts=ACCOUNTS, users=USERS, default_account="lab"))
    assert tenancy.resolve("root", None, None, None)[0] == "lab"
    assert tenancy.resolve("root", "lab", None, None)[0] == "lab"
    assert tenancy.resolve("alice", None, None, None)[0] == "vision", "a listed user keeps her own accounts"
    with pytest.raises(TenancyError, match="'root' has no \\[\\[users\\]\\] entry and may use only 'lab'"):
        tenancy.resolve("root", "vision", None, None)


def test_default_account_must_exist() -> None:
    with pytest.raises(ValidationError, match="default_account 'nope' is not a defined account"):
        TenancySpec(accounts=ACCOUNTS, default_account="nope")
