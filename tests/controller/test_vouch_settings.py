"""[auth] agents_vouch_for_admins and agents_vouch_min_uid: safe unless said, and checked (docs/configuration.md)."""
from __future__ import annotations

import pytest

from corral.controller.settings import SettingsError, auth_from_dict


def test_agents_vouch_for_admins_is_off_by_default_and_a_boolean():
    assert auth_from_dict({}).agents_vouch_for_admins is False
    assert auth_from_dict({"agents_vouch_for_admins": True}).agents_vouch_for_admins is True
    with pytest.raises(SettingsError, match=r"\[auth\]: agents_vouch_for_admins 'yes': true or false"):
        auth_from_dict({"agents_vouch_for_admins": "yes"}, "corral.toml")


def test_agents_vouch_min_uid_is_login_defs_uid_min_unless_said():
    assert auth_from_dict({}).agents_vouch_min_uid == 1000
    assert auth_from_dict({"agents_vouch_min_uid": 500}).agents_vouch_min_uid == 500
    for bad in (0, -1, True, "1000", 2**32):
        with pytest.raises(SettingsError, match=r"\[auth\]: agents_vouch_min_uid .*: a uid, 1\.\.4294967295"):
            auth_from_dict({"agents_vouch_min_uid": bad}, "corral.toml")
