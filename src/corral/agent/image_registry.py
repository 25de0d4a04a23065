"""Images pulled from a registry with Debian's `skopeo`: the references users type (pyxis's
`registry#repository:tag`, `docker://registry/repository:tag`, a bare `repository:tag` from Docker Hub) are
resolved to the digest of their manifest, which keys the node's cache (two jobs asking for one tag at once
pull it once), then copied, for this node's architecture, into an OCI layout directory that the cache
unpacks like any layered image. Credentials are the node's (`skopeo login`); a registry that speaks plain
HTTP is pulled from only when the node's configuration names it insecure.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

from corral.agent.image_archives import ImageError

REGISTRY_SCHEMES = ("docker://",)
RESOLVE_TIMEOUT = "60s"
# a name ending so is a file the user meant (and is missing), not a repository on Docker Hub
IMAGE_FILE_SUFFIXES = (".sif", ".sqfs", ".squashfs", ".sqsh", ".tar", ".tar.gz", ".tgz", ".oci", ".img")


def is_registry_reference(image: str) -> bool:
    """A registry reference, not a file: a docker:// URL, pyxis's `#` form, or a name that is neither a
    path (/…, ./…, ../…) nor an existing file."""
    if image.startswith(REGISTRY_SCHEMES) or "#" in image:
        return True
    if image.startswith(("/", "./", "../", "~")) or Path(image).exists():
        return False
    return not image.lower().endswith(IMAGE_FILE_SUFFIXES)


def docker_reference(image: str) -> str:
    """`docker://registry/repository:tag` for any form users write."""
    if image.startswith(REGISTRY_SCHEMES):
        return image
    registry, hash_mark, repository = image.partition("#")
    if hash_mark:  # pyxis and enroot: REGISTRY#REPOSITORY[:TAG]
        if not registry or not repository:
            raise ImageError(f"image {image!r} is not a registry reference: write REGISTRY#REPOSITORY:TAG "
                             "(e.g. nvcr.io#nvidia/pytorch:24.05-py3)")
        return f"docker://{registry}/{repository}"
    return f"docker://{image}"


def registry_host(reference: str) -> str:
    first = reference.removeprefix("docker://").split("/", 1)[0]
    return first if ("." in first or ":" in first or first == "localhost") and "/" in reference[9:] \
        else "docker.io"


def repository(reference: str) -> str:
    """The reference without its tag or digest: docker://host/repo."""
    head, slash, last = reference.split("@", 1)[0].rpartition("/")
    return f"{head}{slash}{last.split(':', 1)[0]}"


def _skopeo() -> str:
    found = shutil.which("skopeo")
    if not found:
        raise ImageError("this node cannot pull images: install skopeo (Debian: apt-get install skopeo), or "
                         "pass the path of an image file (docker-archive, OCI archive, squashfs or .sif)")
    return found


def _explain(image: str, reference: str, stderr: str) -> ImageError:
    host = registry_host(reference)
    said = stderr.strip().splitlines()[-1][-400:] if stderr.strip() else "no message"
    if "invalid reference format" in stderr:
        return ImageError(f"{image!r} is not an image reference: write docker://REGISTRY/REPOSITORY:TAG, "
                          f"REGISTRY#REPOSITORY:TAG, or the path of an image file [{said}]")
    if any(sign in stderr for sign in ("manifest unknown", "name unknown", "not found", "NAME_UNKNOWN")):
        return ImageError(f"image {image} not found in registry {host}: check its name and tag (skopeo "
                          f"list-tags {repository(reference)}) [{said}]")
    if any(sign in stderr for sign in ("unauthorized", "authentication required", "denied")):
        return ImageError(f"registry {host} refused to give {image}: log the node in (skopeo login {host}) "
                          f"or use a public image [{said}]")
    if "server gave HTTP response to HTTPS client" in stderr:
        return ImageError(f"registry {host} speaks plain HTTP: name it among the node's insecure registries "
                          f"to pull {image} from it [{said}]")
    if any(sign in stderr for sign in ("connection refused", "no such host", "timeout", "dial tcp",
                                       "network is unreachable", "no route to host")):
        return ImageError(f"cannot pull {image}: registry {host} is unreachable from this node; check the "
                          "name, or save the image to a file where the registry is reachable (skopeo copy "
                          f"{reference} docker-archive:image.tar) and pass its path [{said}]")
    return ImageError(f"cannot pull {image} from {host}: {said}")


def check_registry_host(text: str) -> str:
    """A registry named insecure, as `registry_host` writes it: HOST or HOST:PORT (ValueError if not)."""
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?(:[0-9]{1,5})?", text):
        raise ValueError(f"{text!r} is not a registry: write HOST or HOST:PORT, as in an image reference "
                         "(registry.local:5000)")
    return text


def _tls(reference: str, insecure: frozenset[str], flag: str) -> list[str]:
    return [f"--{flag}=false"] if registry_host(reference) in insecure else []


def resolve(image: str, insecure: frozenset[str]) -> tuple[str, str]:
    """The reference and the hex SHA-256 digest of its manifest (what the tag names now)."""
    reference = docker_reference(image)
    done = subprocess.run([_skopeo(), "--command-timeout", RESOLVE_TIMEOUT, "inspect", "--raw",
                           *_tls(reference, insecure, "tls-verify"), reference],
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise _explain(image, reference, done.stderr.decode(errors="replace"))
    return reference, hashlib.sha256(done.stdout).hexdigest()


def pull(image: str, reference: str, digest: str, layout: Path, architecture: str,
         insecure: frozenset[str]) -> None:
    """Copy the manifest `digest` names (this node's architecture where it is a list) into an OCI layout
    directory; pulling by digest, the copy is the image the key was made of even if the tag moves."""
    argv = [_skopeo(), "copy", "--quiet", "--override-os", "linux", "--override-arch", architecture,
            "--tmpdir", str(layout.parent), *_tls(reference, insecure, "src-tls-verify"),
            f"{repository(reference)}@sha256:{digest}", f"oci:{layout}:image"]
    done = subprocess.run(argv, capture_output=True, check=False)
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace")
        if "no image found in manifest list for architecture" in stderr or "choosing image instance" in stderr:
            raise ImageError(f"{image} has no image for {architecture}: use an image built for {architecture} "
                             f"(docker build --platform linux/{architecture}) [{stderr.strip()[-300:]}]")
        raise _explain(image, reference, stderr)
