"""Exceptions raised by the helper. Every message names the file or checkpoint involved."""

from __future__ import annotations


class SpotvisorHelperError(Exception):
    """Base class of every error this package raises on purpose."""


class CheckpointError(SpotvisorHelperError):
    """A checkpoint could not be written, found, verified or loaded."""


class ManifestError(CheckpointError):
    """A manifest is missing, malformed, or does not match the files it lists."""


class NoticeError(SpotvisorHelperError):
    """The preemption notice file exists but cannot be understood."""
