"""AMIs an EC2NodeClass's ``amiSelectorTerms`` select, an alias through EKS's public SSM parameters
(karpenter-provider-aws ``pkg/providers/amifamily`` and ``pkg/providers/ssm``).

The AMI family a node class bootstraps with is decided by the one rule, ``api.ec2nodeclass.ami_family_for``;
this provider only finds images.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.errors import translate, translates
from serverless_karpenter.adapters.providers.model import Image, tag_filters
from serverless_karpenter.api.ec2nodeclass import ami_family_for

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ssm import SSMClient

ARCHITECTURES = ("amd64", "arm64")


class AMIProvider(Protocol):
    def select(self, terms: Sequence[Mapping[str, Any]], ami_family: str | None) -> tuple[str, list[Image]]:
        """The AMI family and the images the terms select, newest first."""
        ...


class DefaultAMIProvider:
    def __init__(self, ec2: EC2Client, ssm: SSMClient, kubernetes_version: str) -> None:
        self._ec2 = ec2
        self._ssm = ssm
        self._k8s_version = kubernetes_version

    @translates
    def select(self, terms: Sequence[Mapping[str, Any]], ami_family: str | None) -> tuple[str, list[Image]]:
        found: dict[str, Image] = {}
        for term in terms:
            if term.get("alias"):
                # An alias stands alone (the API forbids other terms beside it); it sets the family
                # unless spec.amiFamily does (Custom with an alias: the AMIs, not the bootstrap).
                family_name, _, version = str(term["alias"]).partition("@")
                return ami_family_for(ami_family, family_name), self._alias_images(family_name, version)
            kwargs: dict[str, Any] = {}
            filters = tag_filters(term.get("tags") or {})
            if term.get("id"):
                kwargs["ImageIds"] = [term["id"]]
            if term.get("name"):
                filters.append({"Name": "name", "Values": [term["name"]]})
                # A name alone could be anybody's image: Karpenter looks in this account and Amazon's.
                kwargs["Owners"] = [term["owner"]] if term.get("owner") else ["self", "amazon"]
            elif term.get("owner"):
                kwargs["Owners"] = [term["owner"]]
            if filters:
                kwargs["Filters"] = filters
            for image in self._ec2.describe_images(**kwargs)["Images"]:
                found[image["ImageId"]] = _image(image)
        return ami_family_for(ami_family, None), sorted(
            found.values(), key=lambda i: (i.creation_date, i.id), reverse=True
        )

    def _alias_images(self, family_name: str, version: str) -> list[Image]:
        """EKS's public SSM parameters name the AMI per Kubernetes version, arch and release."""
        ids: dict[str, str] = {}
        for arch in ARCHITECTURES:
            path = amifamily.ssm_parameter_for_alias(
                family_name, version or "latest", self._k8s_version, arch
            )
            try:
                ids[arch] = self._ssm.get_parameter(Name=path)["Parameter"]["Value"]
            except ClientError as error:
                if translate(error).code != "ParameterNotFound":
                    raise
        details: dict[str, Mapping[str, Any]] = {}
        if ids:
            try:
                described = self._ec2.describe_images(ImageIds=sorted(set(ids.values())))["Images"]
                details = {i["ImageId"]: i for i in described}
            except ClientError as error:
                if "NotFound" not in translate(error).code:
                    raise
        # The parameter's arch is authoritative (it is in the path); the image adds name and date.
        return [
            Image(
                id=image_id,
                name=str(details.get(image_id, {}).get("Name", "")),
                arch=arch,
                creation_date=str(details.get(image_id, {}).get("CreationDate", "")),
            )
            for arch, image_id in ids.items()
        ]


def _image(raw: Mapping[str, Any]) -> Image:
    arch = {"x86_64": "amd64", "arm64": "arm64"}.get(raw.get("Architecture", "x86_64"), "amd64")
    return Image(raw["ImageId"], raw.get("Name", ""), arch, raw.get("CreationDate", ""))
