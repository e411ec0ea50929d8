"""What this machine offers for training: package versions and their pairing, the accelerators torch sees, what the
vendors' smi tools see, and the process-group backends. Read-only, no network; `python -m detect.doctor` prints it.

torch_npu names used here are checked against the 2.14.0 wheel (docs/torch-npu.md); none was run on an NPU.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from packaging.requirements import Requirement

from detect.backend.base import BackendUnavailable
from detect.backend.environment import FAIL, INFO, OK, WARN, Check, environment_checks
from detect.backend.npu import import_torch_npu
from detect.backend.npu_ops import lists_for
from detect.backend.npu_ops.versions import TOOLKIT_INFO, check_pair, read_cann_version
from detect.errors import one_line

MIN_PYTHON = (3, 10)  # pyproject.toml's requires-python
SMI_TIMEOUT_S = 20.0  # a hung driver must not hang the doctor
Runner = Callable[..., subprocess.CompletedProcess]


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """An accelerator kind torch can use here: its visible devices and its process-group backend (if registered)."""

    kind: str
    devices: tuple[str, ...]
    process_group: str | None


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """Every check, and the accelerators that work (in the order `--device auto` tries them)."""

    checks: tuple[Check, ...]
    accelerators: tuple[Accelerator, ...]


def _minor(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as 2.14.1+cpu."""
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def torch_checks() -> list[Check]:
    """Python, torch and torchvision, whether torchvision pairs with torch, and whether its compiled ops load."""
    python = ".".join(map(str, sys.version_info[:3]))
    checks = [Check("python", OK if sys.version_info[:2] >= MIN_PYTHON else FAIL,
                    f"{python} ({platform.system()} {platform.machine()})", "detect needs Python >= 3.10")]
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    checks.append(Check("torch", OK, f"{torch.__version__} ({build}, {torch.get_num_threads()} CPU threads)"))
    # torchvision 0.(N+15) is built for torch 2.N (torchvision's README, compatibility table).
    torch_minor, vision_minor = _minor(torch.__version__), _minor(torchvision.__version__)
    paired = torch_minor[0] == 2 and vision_minor == (0, torch_minor[1] + 15)
    hint = f"install the torchvision built for torch {torch_minor[0]}.{torch_minor[1]}"
    checks.append(Check("torchvision", OK if paired else FAIL,
                        f"{torchvision.__version__} ({'pairs' if paired else 'does not pair'} with torch "
                        f"{torch_minor[0]}.{torch_minor[1]})", "" if paired else hint))
    try:  # a mismatched build fails here ("operator torchvision::nms does not exist")
        torchvision.ops.nms(torch.zeros(1, 4), torch.ones(1), 0.5)
        checks.append(Check("torchvision ops", OK, "nms runs"))
    except Exception as error:  # noqa: BLE001 (any failure of the compiled extension is the finding)
        checks.append(Check("torchvision ops", FAIL, one_line(error), hint))
    return checks


def _distribution(name: str) -> tuple[str | None, list[str]]:
    """(version, requirements) of an installed distribution, (None, []) when pip does not know it."""
    try:
        return importlib.metadata.version(name), importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return None, []


def _torch_pairing(requirements: list[str], version: str) -> tuple[bool, str]:
    """Whether this torch meets torch_npu's own `torch==...` requirement (else its major.minor must match)."""
    for text in requirements:
        requirement = Requirement(text)
        if requirement.name == "torch":
            return requirement.specifier.contains(torch.__version__, prereleases=True), f"needs {requirement}"
    same = _minor(version) == _minor(torch.__version__)
    return same, f"torch {'.'.join(map(str, _minor(version)))}.* (no package metadata: major.minor compared)"


def npu_checks(environ: Mapping[str, str]) -> tuple[list[Check], Accelerator | None]:
    """torch_npu: installed, paired with torch, importable (CANN sourced), its NPUs and hccl; CANN's version."""
    version, requirements = _distribution("torch_npu")
    try:
        module = import_torch_npu()
    except BackendUnavailable as error:
        cause = error.__cause__
        if isinstance(cause, ModuleNotFoundError) and cause.name == "torch_npu":
            return [Check("torch_npu", INFO, "not installed (only needed for Ascend NPUs)")], None
        return [Check("torch_npu", FAIL, f"{version or 'installed'} but import fails: {one_line(cause or error)}",
                      "source the CANN toolkit's set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh) "
                      "and check that CANN matches torch_npu; until then use --device cpu, and note that "
                      "`import torch` fails in programs that leave TORCH_DEVICE_BACKEND_AUTOLOAD unset"),
                *cann_checks(environ, version)], None
    version = version or getattr(module, "__version__", "unknown")
    paired, rule = _torch_pairing(requirements, version)
    checks = [Check("torch_npu", OK if paired else FAIL, f"{version} ({rule}; torch is {torch.__version__})",
                    "" if paired else "install the torch release torch_npu was built for (torch_npu pins it)"),
              op_lists_check(version), *cann_checks(environ, version)]
    try:
        runtime = module.npu
        count = runtime.device_count() if runtime.is_available() else 0
        names = tuple(str(runtime.get_device_name(index)) for index in range(count))
    except Exception as error:  # noqa: BLE001 (a broken driver or runtime is the finding)
        return [*checks, Check("NPUs", FAIL, one_line(error), "check the driver with npu-smi info")], None
    if not names:
        return [*checks, Check("NPUs", WARN, "torch_npu sees no NPU", "check npu-smi info and "
                                                                         "ASCEND_RT_VISIBLE_DEVICES")], None
    # importing torch_npu registers it (docs/torch-npu.md, "Distributed (HCCL)")
    hccl = dist.is_available() and dist.is_backend_available("hccl")
    checks.append(Check("NPUs", OK, f"{len(names)}: {', '.join(sorted(set(names)))}"))
    checks.append(Check("hccl", OK if hccl else WARN, "registered" if hccl else "not registered",
                        "" if hccl else "multi-NPU training needs torch_npu's hccl process group"))
    return checks, Accelerator("npu", names, "hccl" if hccl else None)


def op_lists_check(version: str) -> Check:
    """Which torch_npu release the kernel lists of `doctor --ops` describe, against the installed one."""
    described = lists_for(version)
    if re.match(r"\d+\.\d+", version) and _minor(described) == _minor(version):
        return Check("NPU op lists", OK, f"torch_npu {described}'s (python -m detect.doctor --ops)")
    return Check("NPU op lists", WARN, f"none for torch_npu {version}: python -m detect.doctor --ops describes "
                                       f"torch_npu {described}", 'pip install "detect-trainer[npu]" pins the '
                                                                 "torch_npu releases that have lists")


def cann_checks(environ: Mapping[str, str], torch_npu: str | None = None) -> list[Check]:
    """The CANN toolkit set_env.sh points at: ASCEND_HOME_PATH and ASCEND_OPP_PATH exist, its version (the toolkit's
    own install record), and whether it pairs with torch_npu `torch_npu` (docs/torch-npu.md, "Versions")."""
    home = environ.get("ASCEND_HOME_PATH")
    if not home:
        return [Check("CANN", FAIL, "ASCEND_HOME_PATH is not set (CANN's set_env.sh was not sourced)",
                      "source /usr/local/Ascend/ascend-toolkit/set_env.sh (or your CANN install's set_env.sh)")]
    missing = [name for name in ("ASCEND_HOME_PATH", "ASCEND_OPP_PATH") if not Path(environ.get(name, "")).is_dir()]
    if missing:
        return [Check("CANN", FAIL, f"{' and '.join(missing)} missing or not a folder",
                      "reinstall the CANN toolkit (with its opp package) and source its set_env.sh")]
    version = read_cann_version(Path(home))
    if version is None:
        return [Check("CANN", WARN, f"no {TOOLKIT_INFO} under {home}: its version is unknown",
                      f"ASCEND_HOME_PATH should be the toolkit's folder, which holds <arch>-linux/{TOOLKIT_INFO}")]
    return [Check("CANN", OK, f"{version} at {home}"), *([check_pair(torch_npu, version)] if torch_npu else [])]


def cuda_checks() -> tuple[list[Check], Accelerator | None]:
    """CUDA: whether torch is a CUDA build, its GPUs and nccl."""
    if torch.version.cuda is None:
        return [Check("CUDA", INFO, "torch is a CPU-only build")], None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        return [Check("CUDA", INFO, f"torch (CUDA {torch.version.cuda}) sees no GPU")], None
    names = tuple(torch.cuda.get_device_name(index) for index in range(count))
    nccl = dist.is_available() and dist.is_nccl_available()
    return [Check("CUDA", OK, f"{count} GPU(s): {', '.join(sorted(set(names)))}"),
            Check("nccl", OK if nccl else WARN, "available" if nccl else "not available",
                  "" if nccl else "multi-GPU training needs a torch build with NCCL")], \
        Accelerator("cuda", names, "nccl" if nccl else None)


def smi_checks(run: Runner = subprocess.run) -> list[Check]:
    """What npu-smi and nvidia-smi report, where installed (the driver's view, independent of torch)."""
    checks = []
    for tool, args, pattern in (("npu-smi", ["info", "-l"], r"Total Count\s*:\s*(\d+)"),
                                ("nvidia-smi", ["-L"], r"(?m)^GPU \d+:")):
        if shutil.which(tool) is None:
            continue
        try:
            result = run([tool, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            checks.append(Check(tool, FAIL, one_line(error), "the driver does not answer: check it is loaded"))
            continue
        if result.returncode != 0:
            message = " ".join((result.stderr or result.stdout).split())[:200]
            checks.append(Check(tool, FAIL, f"exit code {result.returncode}: {message}",
                                "the driver does not answer: check it is installed and loaded"))
            continue
        found = re.findall(pattern, result.stdout)
        count = int(found[0]) if found and found[0].isdigit() else len(found)
        checks.append(Check(tool, OK, f"{tool} {' '.join(args)}: {count} device(s)"))
    return checks


def diagnose(environ: Mapping[str, str], run: Runner = subprocess.run) -> Diagnosis:
    """Every check, in the order the doctor prints them."""
    checks = torch_checks()
    npu, npu_accelerator = npu_checks(environ)
    cuda, cuda_accelerator = cuda_checks()
    gloo = dist.is_available() and dist.is_gloo_available()
    checks += [*npu, *cuda, *smi_checks(run),
               Check("gloo", OK if gloo else WARN, "available (cpu process groups)" if gloo else "not available"),
               *environment_checks(environ)]
    accelerators = tuple(item for item in (npu_accelerator, cuda_accelerator) if item is not None)
    return Diagnosis(tuple(checks), accelerators)
