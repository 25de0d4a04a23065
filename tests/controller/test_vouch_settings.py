"""[auth] agents_vouch_for_admins: off unless said, and only a boolean (docs/configuration.md)."""
from __future__ import annotations

import pytest

from corral.controller.settings import SettingsError, auth_from_dict


def test_agents_vouch_for_admins_is_off_by_default_and_a_boolean():
    assert auth_from_dict({}).agents_vouch_for_admins is False
    assert auth_from_dict({"agents_vouch_for_admins": True}).agents_vouch_for_admins is True
    with pytest.raises(SettingsError, match=r"\[auth\]: agents_vouch_for_admins 'yes': true or false"):
        auth_from_dict({"agents_vouch_for_admins": "yes"}, "corral.toml")
