"""Where an op would run on an Ascend NPU with a given torch_npu: its NPU kernel, a composite of torch that decomposes
into other ops, a view, a registered kernel that computes on the host, or nothing (torch_npu's CPU fallback).

The lists are data, one pair per torch_npu release we pin (pyproject.toml's npu extra): torch_npu_<version>.json (the
wheel's registrations and the strings of its library) and op_plugin_v<major.minor>.json (Ascend/op-plugin's entries for
that line), made by scripts/npu_op_lists.py; torch's composite kernels are asked of the dispatcher at run time
(docs/torch-npu.md, "What runs where")."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import re
from importlib import resources

import torch
from packaging.version import InvalidVersion, Version

# Where torch's dispatcher looks for an NPU tensor's kernel, in its order: the backend's own (torch_npu's, registered
# for the PrivateUse1 key), then a composite (docs/torch-npu.md, "What runs where"), then the backend fallback.
EXPLICIT_COMPOSITES = ("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd")
IMPLICIT_COMPOSITE = "CompositeImplicitAutograd"
NPU_KEY = "PrivateUse1"  # torch_npu registers its kernels for this key, renamed "npu"
# Namespaces whose ops torch_npu registers under their bare names: aten's, and its own custom ops (torch.ops.npu).
BARE_NAMESPACES = ("aten", "npu")

# Kinds of verdict.
NPU = "npu"  # an NPU kernel
COMPOSITE = "composite"  # torch's composite kernel runs; the ops it calls are checked in turn
VIEW = "view"  # a composite view or alias: metadata only, no kernel
HOST = "host"  # a registered kernel that computes on the CPU (it warns, as the fallback does)
MISSING = "missing"  # no kernel: torch_npu's CPU fallback (warning) or, with TORCH_NPU_FALLBACK_CPU_DISABLE=1, an error


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Where an op runs on the NPU and which source says so."""

    kind: str
    source: str

    @property
    def covered(self) -> bool:
        """Whether the op (itself) computes on the NPU or is resolved there without a kernel of its own."""
        return self.kind in (NPU, COMPOSITE, VIEW)


LISTS = re.compile(r"torch_npu_(\d+\.\d+\.\d+)\.json")


def _read(name: str) -> dict:
    return json.loads(resources.files(__package__).joinpath(name).read_text())


def list_versions() -> list[str]:
    """The torch_npu releases the package has kernel lists for, oldest first ("2.9.0", "2.14.0")."""
    found = [match.group(1) for entry in resources.files(__package__).iterdir()
             if (match := LISTS.fullmatch(entry.name))]
    return sorted(found, key=Version)


def _minor(version: str) -> tuple[int, int]:
    release = Version(version).release
    return release[0], release[1]


def lists_for(installed: str | None) -> str:
    """The lists that describe torch_npu `installed`: those of its major.minor line (2.9.0's for 2.9.0.post6), else
    the newest (also when nothing is installed or the version does not parse)."""
    versions = list_versions()
    try:
        same_line = [version for version in versions if installed and _minor(version) == _minor(installed)]
    except InvalidVersion:
        same_line = []
    return (same_line or versions)[-1]


def installed_version() -> str | None:
    """The installed torch_npu's version, from its package metadata (torch_npu is not imported)."""
    try:
        return importlib.metadata.version("torch_npu")
    except importlib.metadata.PackageNotFoundError:
        return None


def chosen_lists(asked: str | None = None) -> tuple[NpuKernels, str | None]:
    """The kernel lists of torch_npu `asked` (its line's), else of the installed torch_npu, else the newest; and a
    line saying which release they describe when the installed one differs (None when it does not)."""
    installed = installed_version()
    kernels = npu_kernels(lists_for(asked or installed))
    if installed and kernels.version != installed:
        return kernels, f"torch_npu {installed} is installed; these lists describe torch_npu {kernels.version}"
    return kernels, None


@dataclasses.dataclass(frozen=True)
class NpuKernels:
    """The NPU's kernels by op name (`add.Tensor`, `npu_nms_v4`) for one torch_npu release, with their sources."""

    version: str  # the torch_npu release the lists describe, e.g. "2.14.0"
    registered: frozenset[str]  # what the torch_npu wheel registers for the NPU
    own: frozenset[str]  # the part torch_npu itself registers (the rest comes from op-plugin)
    op_plugin: dict[str, str]  # name -> "acl_op", "op_api" or "acl_op, op_api" (op-plugin's entries for the version)
    host_kernels: dict[str, str]  # registered kernels that compute on the CPU -> torch_npu's warning
    refuse_internal_format: frozenset[str]  # kernels that raise on tensors in an internal (private) format
    torch_npu_source: str
    op_plugin_source: str

    @classmethod
    def load(cls, version: str) -> NpuKernels:
        """The lists shipped with the package for torch_npu `version` (one of list_versions())."""
        wheel = _read(f"torch_npu_{version}.json")
        plugin = _read(f"op_plugin_v{'.'.join(map(str, _minor(version)))}.json")
        kinds: dict[str, list[str]] = {}
        for kind in ("acl_op", "op_api"):
            for name in plugin[kind]:
                kinds.setdefault(name, []).append(kind)
        return cls(wheel["version"], frozenset(wheel["registered"]), frozenset(wheel["own"]),
                   {name: ", ".join(found) for name, found in kinds.items()}, dict(wheel["host_kernels"]),
                   frozenset(wheel["refuse_internal_format"]), f"torch_npu {wheel['version']}",
                   f"op-plugin {plugin['version']} ({plugin['commit'][:12]})")

    def acl_op_only(self, name: str) -> bool:
        """Whether op-plugin implements `name` (with its overload) only as a legacy acl_op kernel, which
        ACL_OP_INIT_MODE=2 disables (docs/torch-npu.md, "NMS on the NPU")."""
        return self.op_plugin.get(name) == "acl_op"

    def registration(self, namespace: str, name: str) -> Verdict | None:
        """The NPU kernel torch_npu registers for `namespace::name` (name with its overload), or None."""
        if namespace not in BARE_NAMESPACES or name not in self.registered:
            return None
        base = name.split(".", 1)[0]
        if name in self.host_kernels or base in self.host_kernels:
            return Verdict(HOST, f"{self.torch_npu_source}: a kernel that runs on the CPU")
        if name in self.op_plugin:
            return Verdict(NPU, f"{self.op_plugin_source} {self.op_plugin[name]}")
        return Verdict(NPU, self.torch_npu_source)

    def host_warning(self, name: str) -> str | None:
        """torch_npu's own warning for a registered kernel that computes on the CPU."""
        return self.host_kernels.get(name) or self.host_kernels.get(name.split(".", 1)[0])


@functools.cache
def npu_kernels(version: str | None = None) -> NpuKernels:
    """The shipped lists of torch_npu `version` (None: the newest), read once."""
    return NpuKernels.load(version or list_versions()[-1])


def op_name(op: torch._ops.OpOverload) -> tuple[str, str]:
    """(namespace, name with overload) of an op: ("aten", "add.Tensor"), ("aten", "sigmoid")."""
    namespace, name = op._schema.name.split("::", 1)
    overload = op._overloadname
    return namespace, name if overload == "default" else f"{name}.{overload}"


def qualified(op: torch._ops.OpOverload) -> str:
    """`aten::add.Tensor`, as torch_npu's messages name an op."""
    namespace, name = op_name(op)
    return f"{namespace}::{name}"


def _is_view(op: torch._ops.OpOverload) -> bool:
    """Whether the op returns an alias of an input (a view), not new data."""
    return any(ret.alias_info is not None and not ret.alias_info.is_write for ret in op._schema.returns)


def verdict(op: torch._ops.OpOverload, kernels: NpuKernels | None = None) -> Verdict:
    """Where `op` runs when its tensors are on an NPU with the torch_npu of `kernels` (None: the newest lists), in the
    dispatcher's order of precedence."""
    return _verdict(op, (kernels or npu_kernels()).version)


@functools.cache
def _verdict(op: torch._ops.OpOverload, version: str) -> Verdict:
    kernels = npu_kernels(version)
    namespace, name = op_name(op)
    registered = kernels.registration(namespace, name)
    if registered is not None:
        return registered
    key_name = qualified(op)
    if torch._C._dispatch_has_kernel_for_dispatch_key(key_name, NPU_KEY):  # torch's own, as c10d's collectives
        return Verdict(NPU, f"torch {torch.__version__.split('+')[0]} (its {NPU_KEY} kernel)")
    for key in (*EXPLICIT_COMPOSITES, IMPLICIT_COMPOSITE):
        if torch._C._dispatch_has_kernel_for_dispatch_key(key_name, key):
            return Verdict(VIEW if _is_view(op) else COMPOSITE, f"torch {key}")
    return Verdict(MISSING, f"none in {kernels.torch_npu_source} or {kernels.op_plugin_source}")
