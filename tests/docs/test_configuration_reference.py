"""docs/configuration.md against the loader: it describes every key the controller's config file accepts,
no key the loader would refuse, and its examples (and the README's tenancy example) load; the README's and
docs/services.md's service files are valid services."""
from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from corral.api.service_file import parse_service
from corral.api.tenancy import TenancySpec
from corral.controller import settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
TOP_LEVEL_HEADING = "## Top-level keys"


def documented_keys() -> set[str]:
    """`key` for top-level keys, `[table].key` and `[[array]].key`, from the rows of each section's table."""
    keys: set[str] = set()
    section: str | None = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            table = re.fullmatch(r"## `(\[\[?\w+\]\]?)`", line)
            section = table.group(1) + "." if table else ("" if line == TOP_LEVEL_HEADING else None)
        elif section is not None and (row := re.match(r"\| `(\w+)` \|", line)):
            keys.add(section + row.group(1))
    return keys


def _model_of(annotation: object) -> tuple[str, type[BaseModel]] | None:
    """("[[name]]" or "[name]" brackets, model) when a field holds tables; None for a plain value."""
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return "[[{}]]", item
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "[{}]", annotation
    return None


def accepted_keys() -> set[str]:
    """What the loader accepts: its controller-setting keys, and the tenancy model's fields."""
    nested = {"scheduler": ("[{}]", settings._SCHED), "partitions": ("[[{}]]", settings._PART),
              "auth": ("[{}]", settings._AUTH), "ratelimit": ("[{}]", settings._RATELIMIT),
              "http": ("[{}]", settings._HTTP), "gateway": ("[{}]", settings._GATEWAY)}
    for name, field in TenancySpec.model_fields.items():
        if (found := _model_of(field.annotation)) is not None:
            brackets, model = found
            nested[name] = (brackets, set(model.model_fields))
    keys = {name for name in settings._TOP if name not in nested}
    for name, (brackets, fields) in nested.items():
        keys |= {f"{brackets.format(name)}.{key}" for key in fields}
    return keys


def test_every_accepted_key_is_documented_and_no_documented_key_is_unknown() -> None:
    documented, accepted = documented_keys(), accepted_keys()
    assert {"[[partitions]].priority_job_factor", "[scheduler].max_reservations", "kill_grace_s",
            "[priority].weight_qos"} <= accepted
    assert sorted(accepted - documented) == [], "undocumented keys"
    assert sorted(documented - accepted) == [], "documented keys the loader refuses"


def toml_blocks(path: Path) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", path.read_text(), re.S)


def load(data: dict) -> None:
    """As the controller reads its config file (load_settings, less the file)."""
    settings.settings_from_dict(data, "example")
    settings.tenancy_from_dict(data, "example")
    settings.auth_from_dict(data.get("auth", {}), "example")
    settings.http_from_dict(data.get("http", {}), "example")
    settings.gateway_url_from_dict(data.get("gateway", {}), "example")


def is_service_file(text: str) -> bool:
    """A service's TOML file (`corral service apply -f`) declares a command; a controller config never does."""
    return "command" in tomllib.loads(text)


CONFIG_EXAMPLES = [text for text in toml_blocks(DOC) + toml_blocks(ROOT / "README.md") if not is_service_file(text)]
SERVICE_EXAMPLES = [text for text in toml_blocks(ROOT / "README.md") + toml_blocks(ROOT / "docs" / "services.md")
                    if is_service_file(text)]


@pytest.mark.parametrize("text", CONFIG_EXAMPLES)
def test_examples_load_as_a_controller_config_file(text) -> None:
    load(tomllib.loads(text))


@pytest.mark.parametrize("text", SERVICE_EXAMPLES)
def test_service_examples_load_as_a_service_file(text, tmp_path) -> None:

    parse_service(text, "example", tmp_path)


def test_the_readme_has_a_service_example() -> None:
    assert any(is_service_file(text) for text in toml_blocks(ROOT / "README.md"))


@pytest.mark.parametrize("data", [{"kill_grace": 1}, {"scheduler": {"backfil": True}},
                                  {"partitions": [{"name": "p", "size": 1}]}, {"priority": {"weight_qso": 1}},
                                  {"auth": {"admin": ["alice"]}}])
def test_the_loader_refuses_an_unknown_key_in_each_section(data) -> None:
    with pytest.raises(settings.SettingsError, match="weight_qso|unknown key"):
        load(data)
