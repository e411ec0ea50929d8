"""Regenerate the NPU kernel lists of detect/backend/npu_ops/ from their sources (docs/torch-npu.md, "What runs where"),
once per torch_npu release that pyproject.toml's npu extra allows:

    python scripts/npu_op_lists.py --wheel torch_npu-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl \\
        --op-plugin /path/to/Ascend/op-plugin [--out detect/backend/npu_ops]

--wheel: the torch_npu wheel from PyPI (`pip download --no-deps torch-npu==2.14.0`: pip only reads files, so it needs
no CANN) or the folder it was unzipped into. --op-plugin: a git clone of Ascend/op-plugin (a bare one will do); its
HEAD's op_plugin/config/op_plugin_functions.yaml is read. Writes torch_npu_<version>.json (what the wheel registers for
the NPU, its kernels that run on the host, the ops that refuse internal formats) and op_plugin_v<major.minor>.json
(op-plugin's entries whose acl_op or op_api range covers the wheel's line, v2.14 for 2.14.0), each with its source
files, version and commit. Reads only; no network.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "detect" / "backend" / "npu_ops"
CODEGEN = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
OWN = "torch_npu/csrc/aten/npu_native_functions.yaml"
LIBRARY = "torch_npu/lib/libtorch_npu.so"
VERSION = "torch_npu/version.py"
OP_PLUGIN_YAML = "op_plugin/config/op_plugin_functions.yaml"
SECTIONS = ("official", "supported", "custom", "autograd", "symint", "quant")
# A registered kernel that warns and computes on the CPU says so in one of these two ways (libtorch_npu.so strings).
HOST_KERNEL = re.compile(r"^CAUTION: The operator .*(?:fall back|fallback) to run on the CPU")
NO_INTERNAL_FORMAT = re.compile(r"^Current operator (\w+) do not support internal format\.")
# The fragments torch_npu 2.14.0 builds its fallback messages from: the stand-in's texts must match them
# (tests/npu_standin.py); printed so a regeneration shows a change of wording.
FALLBACK_FRAGMENTS = ("CAUTION: The operator '", "' is not currently supported ",
                      "on the NPU backend and will fall back to run on the CPU.", " This may have performance implications.",
                      "' would execute its main computation on CPU through ", "dispatcher backend fallback",
                      "explicit CPU kernel", ", but CPU fallback is disabled by TORCH_NPU_FALLBACK_CPU_DISABLE=1.")


class Wheel:
    """The files of a torch_npu wheel, from the .whl itself or the folder it was unzipped into."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.archive = zipfile.ZipFile(path) if path.is_file() else None

    def read(self, name: str) -> bytes:
        if self.archive is not None:
            return self.archive.read(name)
        return (self.path / name).read_bytes()

    def digest(self) -> str | None:
        """The .whl's sha256 (None for a folder)."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest() if self.archive is not None else None


def entry_name(entry: str | dict) -> str:
    """`add.Tensor` from a yaml entry: a bare name, or a dict whose func is a schema `add.Tensor(Tensor self, ...)`."""
    text = entry if isinstance(entry, str) else entry["func"]
    return text.split("(", 1)[0].strip()


def registered_names(text: str) -> list[str]:
    """Every op name a torch_npu registration yaml lists, over its sections."""
    data = yaml.safe_load(text) or {}
    return sorted({entry_name(entry) for section in SECTIONS for entry in data.get(section) or []})


def versions(spec: object, all_versions: list[str]) -> list[str]:
    """The versions an op-plugin range names: all_version, [first, last|newest], or 'v2.1, v2.2'."""
    if not spec:
        return []
    if spec == "all_version":
        return list(all_versions)
    if isinstance(spec, list):
        first, last = spec
        last = all_versions[-1] if last == "newest" else last
        return all_versions[all_versions.index(first):all_versions.index(last) + 1]
    return [part.strip() for part in str(spec).split(",")]


def op_plugin_names(text: str, version: str) -> dict[str, list[str]]:
    """{"acl_op": [...], "op_api": [...]}: op-plugin's entries whose range of that implementation covers `version`."""
    data = yaml.safe_load(text)
    found: dict[str, set[str]] = {"acl_op": set(), "op_api": set()}
    for section in SECTIONS:
        for entry in data.get(section) or []:
            for kind, names in found.items():
                if version in versions(entry.get(kind), data["all_version"]):
                    names.add(entry_name(entry))
    return {kind: sorted(names) for kind, names in found.items()}


def printable_strings(blob: bytes, minimum: int = 8) -> list[str]:
    """What `strings -n minimum` prints: runs of printable ASCII."""
    return [match.decode() for match in re.findall(rb"[\x20-\x7e\t]{%d,}" % minimum, blob)]


def library_facts(blob: bytes) -> tuple[dict[str, str], list[str], list[str]]:
    """(host kernels: op -> torch_npu's warning, ops that refuse internal formats, fallback fragments found)."""
    strings = printable_strings(blob, 4)
    host: dict[str, str] = {}
    for line in strings:
        if HOST_KERNEL.match(line):
            for name in re.findall(r"aten::([\w.]+)", line):
                host[name] = line
    refusing = sorted({match.group(1) for line in strings if (match := NO_INTERNAL_FORMAT.match(line))})
    found = [fragment for fragment in FALLBACK_FRAGMENTS if any(fragment in line for line in strings)]
    return dict(sorted(host.items())), refusing, found


def torch_npu_list(wheel: Wheel) -> dict:
    """torch_npu_<version>.json: what the wheel registers for the NPU and what its library says about host kernels."""
    version_text = wheel.read(VERSION).decode()
    version = re.search(r"__version__ = '([^']+)'", version_text).group(1)
    git_version = re.search(r"git_version = '([^']+)'", version_text).group(1)
    host, refusing, fragments = library_facts(wheel.read(LIBRARY))
    return {
        "source": f"torch_npu {version} wheel from PyPI ({wheel.path.name})", "version": version,
        "git_version": git_version, "sha256": wheel.digest(),
        "files": {"registered": CODEGEN, "own": OWN, "host_kernels": LIBRARY, "refuse_internal_format": LIBRARY},
        "regenerate": "python scripts/npu_op_lists.py --wheel WHEEL --op-plugin OP_PLUGIN_GIT",
        "registered": registered_names(wheel.read(CODEGEN).decode()),
        "own": registered_names(wheel.read(OWN).decode()),
        "host_kernels": host, "refuse_internal_format": refusing, "fallback_fragments": fragments,
    }


def git(repository: Path, *arguments: str) -> str:
    return subprocess.run(["git", "-C", str(repository), *arguments], check=True, capture_output=True,
                          text=True).stdout


def op_plugin_list(repository: Path, torch_npu_version: str) -> dict:
    """op_plugin_v<major.minor>.json: op-plugin's entries for the wheel's torch version line (v2.14 for 2.14.0), at HEAD."""
    version = "v" + ".".join(torch_npu_version.split(".")[:2])
    commit = git(repository, "rev-parse", "HEAD").strip()
    date = git(repository, "log", "-1", "--format=%cs", "HEAD").strip()
    return {"source": f"Ascend/op-plugin {OP_PLUGIN_YAML} at {commit} ({date})", "commit": commit, "version": version,
            "regenerate": "python scripts/npu_op_lists.py --wheel WHEEL --op-plugin OP_PLUGIN_GIT",
            **op_plugin_names(git(repository, "show", f"HEAD:{OP_PLUGIN_YAML}"), version)}


def write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=0, sort_keys=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--op-plugin", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for path in (args.wheel, args.op_plugin):
        if not path.exists():
            print(f"error: {path} does not exist", file=sys.stderr)
            return 2
    wheel_list = torch_npu_list(Wheel(args.wheel))
    plugin_list = op_plugin_list(args.op_plugin, wheel_list["version"])
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / f"torch_npu_{wheel_list['version']}.json", wheel_list)
    write(args.out / f"op_plugin_{plugin_list['version']}.json", plugin_list)
    missing = sorted(set(FALLBACK_FRAGMENTS) - set(wheel_list["fallback_fragments"]))
    print(f"torch_npu {wheel_list['version']}: {len(wheel_list['registered'])} registered, "
          f"{len(wheel_list['host_kernels'])} host kernels, {len(wheel_list['refuse_internal_format'])} refuse internal "
          f"formats; op-plugin {plugin_list['version']} at {plugin_list['commit'][:12]}: {len(plugin_list['acl_op'])} "
          f"acl_op, {len(plugin_list['op_api'])} op_api")
    if missing:
        print(f"fallback message fragments not found in {LIBRARY}: {missing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
