"""Stand-in for zero-to-jupyterhub's ``z2jh`` module (hub image only) in the data-science-pack
replica: ``get_config(key, default)`` reads dotted keys of the helm values in the e2e settings
(``helm_values``); ``get_chart_config`` is data-science-pack's helper for ``custom.<key>``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _values() -> dict:
    path = os.environ.get("NEBARI_COLOCATE_E2E_SETTINGS")
    if not path:
        return {}
    return json.loads(Path(path).read_text()).get("helm_values") or {}


def get_config(key, default=None):
    value = _values()
    for level in key.split("."):
        if not isinstance(value, dict) or level not in value:
            return default
        value = value[level]
    return value


def get_chart_config(key, default=""):
    return get_config(f"custom.{key}", default)
