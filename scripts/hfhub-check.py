#!/usr/bin/env python3
"""hfhub-check.py checks stx's Hugging Face cache with huggingface_hub itself.

Run by hub/pyref_test.go with huggingface_hub on PYTHONPATH (scripts/fetch-hfhub.sh installs
it) and HF_HUB_CACHE pointing at the cache stx downloaded into. It reads one JSON object on
stdin:

    {"check": [{"repo_id", "repo_type", "revision", "snapshot", "files": {path: sha256}}],
     "download": [{"repo_id", "repo_type", "revision"}]}

For each "check" entry, with HF_HUB_OFFLINE=1 (set by the caller), snapshot_download(...,
local_files_only=True) must return the snapshot directory stx printed, hf_hub_download(...,
local_files_only=True) must return each file's path in it, and every file must read back with
the given sha256. scan_cache_dir() must then see the cache without warnings (a layout it does
not understand is a warning there). Each "download" entry is downloaded online by
snapshot_download (HF_ENDPOINT is the test's fake hub) and its snapshot path printed, so that
the test can check that stx reads what huggingface_hub wrote.

Prints one JSON object: {"errors": [...], "downloaded": [paths], "version": "..."}.
"""
import hashlib
import json
import os
import sys


def main():
    req = json.load(sys.stdin)
    errors = []
    downloaded = []
    import huggingface_hub
    from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download

    for c in req.get("check", []):
        name = f"{c['repo_type']} {c['repo_id']}@{c['revision']}"
        try:
            got = snapshot_download(
                c["repo_id"], repo_type=c["repo_type"], revision=c["revision"], local_files_only=True
            )
        except Exception as e:  # noqa: BLE001 - reported to the Go test
            errors.append(f"{name}: snapshot_download: {type(e).__name__}: {e}")
            continue
        if os.path.abspath(got) != os.path.abspath(c["snapshot"]):
            errors.append(f"{name}: snapshot_download returned {got}, stx printed {c['snapshot']}")
        for path, sha in sorted(c["files"].items()):
            try:
                p = hf_hub_download(
                    c["repo_id"],
                    path,
                    repo_type=c["repo_type"],
                    revision=c["revision"],
                    local_files_only=True,
                )
            except Exception as e:  # noqa: BLE001
                errors.append(f"{name}: hf_hub_download {path}: {type(e).__name__}: {e}")
                continue
            want = os.path.join(c["snapshot"], *path.split("/"))
            if os.path.abspath(p) != os.path.abspath(want):
                errors.append(f"{name}: {path} is {p}, want {want}")
            with open(p, "rb") as f:
                got_sha = hashlib.sha256(f.read()).hexdigest()
            if got_sha != sha:
                errors.append(f"{name}: {path} reads back with sha256 {got_sha}, want {sha}")

    if req.get("check"):
        info = scan_cache_dir()
        for w in info.warnings:
            errors.append(f"scan_cache_dir: {type(w).__name__}: {w}")
        seen = {(r.repo_type, r.repo_id) for r in info.repos}
        for c in req["check"]:
            if (c["repo_type"], c["repo_id"]) not in seen:
                errors.append(f"scan_cache_dir does not list {c['repo_type']} {c['repo_id']}")

    for d in req.get("download", []):
        try:
            downloaded.append(
                snapshot_download(d["repo_id"], repo_type=d["repo_type"], revision=d["revision"])
            )
        except Exception as e:  # noqa: BLE001
            errors.append(f"download {d['repo_id']}: {type(e).__name__}: {e}")
            downloaded.append("")

    json.dump({"errors": errors, "downloaded": downloaded, "version": huggingface_hub.__version__}, sys.stdout)


if __name__ == "__main__":
    main()
