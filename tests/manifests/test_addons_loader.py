"""The release-manifest loader: the pinned releases, where a manifest is read from (explicit
source, GPUFLEET_ADDONS_DIR, the official URL), reading the local copies and over real HTTP,
and refusing anything that is not a list of Kubernetes objects with an error naming it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.config.addons import (
    ADDONS_DIR_ENV,
    addons_dir,
    controller_releases,
    load_controller_releases,
    load_release,
    parse_release,
    release_source,
)
from gpufleet.errors import CatalogError, TransientBackendError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def releases() -> dict:
    return controller_releases()


def test_pinned_versions_serve_our_api_versions(releases: dict) -> None:
    assert list(releases) == ["jobset", "kueue"]
    assert releases["kueue"].version == "v0.14.8"
    assert releases["kueue"].api_versions == ("kueue.x-k8s.io/v1beta1",)
    assert releases["jobset"].version == "v0.11.1"
    assert releases["jobset"].api_versions == ("jobset.x-k8s.io/v1alpha2",)
    for rel in releases.values():
        assert rel.url == (
            f"https://github.com/kubernetes-sigs/{rel.name}/releases/download/{rel.version}/"
            "manifests.yaml"
        )
        assert rel.image.endswith(f"/{rel.name}:{rel.version}")
        assert (addons_dir() / rel.file).is_file()


def test_source_precedence(releases: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    kueue = releases["kueue"]
    monkeypatch.delenv(ADDONS_DIR_ENV, raising=False)
    assert release_source(kueue) == kueue.url  # the default: the official release
    monkeypatch.setenv(ADDONS_DIR_ENV, "/opt/offline")
    assert release_source(kueue) == f"/opt/offline/{kueue.file}"
    assert release_source(kueue, "https://mirror.example/kueue.yaml") == (
        "https://mirror.example/kueue.yaml"
    )


def test_reads_the_local_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ADDONS_DIR_ENV, str(ROOT / "include/addons"))
    loaded = load_controller_releases()
    for objects in loaded.values():
        kinds = [o["kind"] for o in objects]
        assert kinds[0] == "Namespace" and "CustomResourceDefinition" in kinds
        assert "Deployment" in kinds and "Service" in kinds and "ServiceAccount" in kinds
    with pytest.raises(CatalogError, match="no pinned controller named nope"):
        load_controller_releases({"nope": "x.yaml"})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "holds no Kubernetes objects"),
        ("just a string\n", "document 1 is not a Kubernetes object"),
        ("- 1\n- 2\n", "document 1 is not a Kubernetes object"),
        (
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkind: Service\n",
            "document 2",
        ),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "metadata.name"),
        ("key: [unclosed\n", "not YAML"),
    ],
)
def test_refuses_what_is_not_a_list_of_objects(text: str, match: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=match) as err:
        load_release(controller_releases()["kueue"], str(path))
    assert str(path) in str(err.value)


def test_list_kind_is_unpacked() -> None:
    text = (
        "apiVersion: v1\nkind: List\n"
        "items:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n"
    )
    assert parse_release(text, "x") == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}
    ]


def test_a_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=ADDONS_DIR_ENV):
        load_release(controller_releases()["jobset"], str(tmp_path / "missing.yaml"))


@pytest.fixture
def server() -> Iterator[str]:
    """A real HTTP server serving include/addons, plus /boom (500) and /gone (404)."""
    folder = str(ROOT / "include/addons")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=folder, **kwargs)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/boom":
                self.send_error(500)
                return
            super().do_GET()

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_reads_over_http(server: str, releases: dict) -> None:
    jobset = releases["jobset"]
    objects = load_release(jobset, f"{server}/{jobset.file}")
    assert objects == load_release(jobset, str(ROOT / "include/addons" / jobset.file))
    with pytest.raises(CatalogError, match="HTTP 404"):
        load_release(jobset, f"{server}/gone")
    with pytest.raises(TransientBackendError, match="HTTP 500"):
        load_release(jobset, f"{server}/boom")
    with pytest.raises(CatalogError, match="not a Kubernetes object"):
        load_release(jobset, f"{server}/releases.yaml")


def test_unreachable_url_is_transient(releases: dict) -> None:
    with pytest.raises(TransientBackendError, match=ADDONS_DIR_ENV):
        load_release(releases["kueue"], "http://127.0.0.1:9/manifests.yaml")
