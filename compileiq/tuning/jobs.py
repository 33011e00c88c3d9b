"""What a configuration compiles to (a variant's two compiler jobs) and the keys its builds are
cached and shared under: a build's key (sources, toolchain, arch, both stages' arguments) and a
PTX key (what ptxas is given: configurations whose front-end settings leave the PTX as it was
share one build)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from compileiq.build.compile import (
    RESOURCE_REPORT_VERSION,
    AssembleJob,
    BuildStatus,
    FrontendJob,
    PtxResult,
)
from compileiq.build.workers import VariantJob, VariantResult
from compileiq.core.space import Config, SearchSpace
from compileiq.core.toolchain import Toolchain
from compileiq.source.spec import KernelSpec, SourceBundle


@dataclass(frozen=True)
class Target:
    """What every variant of one run shares."""

    kernel: KernelSpec
    space: SearchSpace
    bundle: SourceBundle
    toolchain: Toolchain


class Jobs:
    """The jobs and build keys of one target's configurations."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._fixed_defines = target.kernel.fixed_define_args()  # the same for every variant
        self._ptx_digests: dict[int, tuple[PtxResult, str]] = {}  # each front end's PTX hashed once

    def job(self, tag: int, config: Config) -> VariantJob:
        target = self._target
        spec, tools, space = target.kernel, target.toolchain, target.space
        frontend_args = (*space.frontend_args(config), *self._fixed_defines)
        return VariantJob(
            tag=tag,
            frontend=FrontendJob(tools.nvcc, target.bundle, spec.ptx_arch, frontend_args, spec.compile_timeout_s),
            assemble=AssembleJob(tools.ptxas, spec.arch, space.ptxas_args(config), spec.compile_timeout_s),
        )

    def build_key(self, config: Config) -> str:
        """Identity of a build: sources, toolchain, arch (and the PTX's, where older) and the rendered arguments of both stages."""
        target = self._target
        space, spec = target.space, target.kernel
        identity = [
            target.bundle.sha256,
            target.toolchain.nvcc_build,
            spec.arch,
            *([spec.ptx_arch] if spec.ptx_arch != spec.arch else []),  # keys of -arch=sm_XY PTX stay as they were
            [*space.frontend_args(config), *self._fixed_defines, *target.bundle.include_args],
            list(space.ptxas_args(config)),
            RESOURCE_REPORT_VERSION,
        ]
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()

    def ptx_key_of(self, job: VariantJob, result: VariantResult) -> str | None:
        """The PTX key of a build compiled past the shared builds (None when the front end failed)."""
        return self.ptx_key(job.assemble, result.ptx) if result.ptx.status is BuildStatus.OK else None

    def ptx_key(self, job: AssembleJob, ptx: PtxResult) -> str:
        """Identity of what ptxas is given: the PTX, its flags, the toolchain and arch. Every
        config with the same PTX and ptxas flags (front-end settings that leave the PTX as it was)
        has the same build."""
        digest = self._ptx_digests.get(id(ptx))
        if digest is None or digest[0] is not ptx:
            digest = self._ptx_digests[id(ptx)] = (ptx, hashlib.sha256(ptx.ptx).hexdigest())
        identity = [
            digest[1],
            ptx.relocatable,
            *([list(ptx.ptxas_base)] if ptx.ptxas_base else []),  # keys without one stay as they were
            self._target.toolchain.nvcc_build,
            job.arch,
            list(job.args),
            RESOURCE_REPORT_VERSION,
        ]
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()
