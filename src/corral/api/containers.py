"""The container fields of a job submission and a step (pyxis's flags; corral.container_options)."""
from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field, model_validator

from corral.api.fields import Comment, FilePath, Name
from corral.container_options import ContainerOptionError, check_fields


class ContainerFields(BaseModel):
    """Run every task in a container (decision 0020). Only a local image file is read on these nodes: a
    docker-archive tarball (`docker save`) on a filesystem every node of the job shares."""

    container_image: FilePath = Field("", description="--container-image: the image's path (a docker-archive "
                                                       "tarball); empty: no container")
    container_mounts: Comment = Field("", description="--container-mounts: SRC[:DST[:ro|rw]][,...]")
    container_workdir: FilePath = Field("", description="--container-workdir: the tasks' directory inside")
    container_name: Name = Field("", description="--container-name: a container the job's later steps reuse "
                                                 "(its changes kept) on each node")
    container_env: Comment = Field("", description="--container-env: NAME[,NAME...], the job's variables that "
                                                   "override the image's")
    container_mount_home: bool = Field(True, description="False: --no-container-mount-home")
    container_remap_root: bool = Field(False, description="--container-remap-root: the user is root inside "
                                                          "(and only there)")

    _for_step: ClassVar[bool] = False  # a step's options may name a container alone: its job's

    @model_validator(mode="after")
    def _container_options_hold(self) -> ContainerFields:
        try:
            check_fields(self.model_dump(include=set(ContainerFields.model_fields)), step=self._for_step)
        except ContainerOptionError as exc:
            raise ValueError(str(exc)) from None
        return self
