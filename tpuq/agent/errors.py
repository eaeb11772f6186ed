"""The agent's error types: it cannot start, and the message says what to do."""

from __future__ import annotations

from tpuq.errors import Failure, TpuqError


class AgentError(TpuqError, RuntimeError):
    """The agent cannot start; the message says what to do."""

    KIND = Failure.UNAVAILABLE


class HostUnfit(AgentError):
    """This host cannot run TPU jobs until a person changes it (its image, its chips,
    its settings): starting again changes nothing, so the agent exits with EXIT_UNFIT,
    which its systemd unit does not restart (RestartPreventExitStatus): no crash loop."""


EXIT_UNFIT = 78  # sysexits.h EX_CONFIG
