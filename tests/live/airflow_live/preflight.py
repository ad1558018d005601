"""Before anything starts: the plugins folder must not hand Airflow a package's modules as
plugins (``check_plugins_folder``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.live.airflow_live.common import PLUGINS_DIR, LiveAirflowError, venv_bin

# Airflow's own walk of the plugins folder, ``find_path_from_directory``. Its module
# (airflow/_shared/module_loading/file_discovery.py, which needs only pathspec) is loaded from
# its file: importing it as ``airflow._shared...`` runs airflow/__init__.py first, about 2 s of
# a start-up spent before any component may start. An Airflow that moved it is imported whole.
_PLUGIN_FILES_PROBE = """
import importlib.util, json, os, sys
try:
    spec = importlib.util.find_spec("airflow")
    path = os.path.join(spec.submodule_search_locations[0], "_shared", "module_loading",
                        "file_discovery.py")
    module_spec = importlib.util.spec_from_file_location("_gpufleet_file_discovery", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    find_path_from_directory = module.find_path_from_directory
except Exception:
    from airflow._shared.module_loading import find_path_from_directory
print(json.dumps([str(p) for p in find_path_from_directory(sys.argv[1], ".airflowignore", "glob")]))
"""


def package_modules_loaded_as_plugins(plugins_dir: Path = PLUGINS_DIR) -> list[str]:
    """Files inside Python packages under ``plugins_dir`` that Airflow would exec as plugins.

    Airflow 3.3's plugin manager imports EVERY ``*.py`` under the plugins folder (recursively,
    minus ``.airflowignore``) as a top-level module named after the file's stem: a package's
    ``__main__.py`` becomes ``sys.modules["__main__"]`` and runs in every component, and each
    module runs twice. Packages such as ``gpufleet`` must be listed in ``plugins/.airflowignore``.
    """
    probe = subprocess.run(
        [str(venv_bin() / "python"), "-c", _PLUGIN_FILES_PROBE, str(plugins_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return []  # cannot tell with this Airflow; let it run
    files = [Path(p) for p in json.loads(probe.stdout.strip().splitlines()[-1])]
    return sorted(
        str(f.relative_to(plugins_dir))
        for f in files
        if f.suffix == ".py" and (f.parent / "__init__.py").exists()
    )


def check_plugins_folder(plugins_dir: Path) -> None:
    leaked = package_modules_loaded_as_plugins(plugins_dir)
    if leaked:
        shown = ", ".join(leaked[:5]) + (" ..." if len(leaked) > 5 else "")
        packages = sorted({Path(f).parts[0] for f in leaked})
        raise LiveAirflowError(
            f"Airflow would import package modules from {plugins_dir} as top-level plugins "
            f"({shown}); a package __main__.py would run in every component. Add "
            f"{plugins_dir / '.airflowignore'} listing {', '.join(p + '/' for p in packages)}"
        )
