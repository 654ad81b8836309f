#!/usr/bin/env python3
"""Checks the minimum supported Rust version the workspace states (`rust-version` in
Cargo.toml) against what it is built from:

- every crate of the workspace states the same version (it inherits the workspace's);
- no crate that a publishable crate needs to build (normal and build dependencies, all
  features, as locked) requires a newer Rust than that.

The standard library APIs the code itself uses are checked by clippy (`incompatible_msrv`,
denied in CI with every other warning), which reads the same `rust-version`.

    scripts/check_msrv.py
"""
import json
import subprocess
import sys


def version(text):
    """`1.89` or `1.89.0` as a tuple of three numbers."""
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--all-features"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {package["id"]: package for package in metadata["packages"]}
    members = [packages[id] for id in metadata["workspace_members"]]
    problems = []

    stated = {member["rust_version"] for member in members}
    if len(stated) != 1 or None in stated:
        named = ", ".join(f"{m['name']}: {m['rust_version']}" for m in members)
        print(f"check_msrv: the crates state different rust-versions ({named})")
        return 1
    msrv = stated.pop()

    # Publishable crates: `publish` unset (crates.io) or naming a registry.
    roots = [m["id"] for m in members if m.get("publish") is None or m["publish"]]
    edges = {}
    for node in metadata["resolve"]["nodes"]:
        edges[node["id"]] = [
            dep["pkg"]
            for dep in node["deps"]
            if any(kind["kind"] in (None, "build") for kind in dep["dep_kinds"])
        ]
    needed, stack = set(), list(roots)
    while stack:
        id = stack.pop()
        if id in needed:
            continue
        needed.add(id)
        stack.extend(edges.get(id, []))

    for id in sorted(needed, key=lambda id: packages[id]["name"]):
        package = packages[id]
        required = package.get("rust_version")
        if required and version(required) > version(msrv):
            problems.append(f"{package['name']} {package['version']} needs Rust {required}")

    if problems:
        print(f"check_msrv: the workspace states rust-version {msrv}, but:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print(f"check_msrv: rust-version {msrv} covers the {len(needed)} crates the published ones build from, on any platform")
    return 0


if __name__ == "__main__":
    sys.exit(main())
