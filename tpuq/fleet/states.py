"""Every state the Cloud TPU API reports, and what the controller does about each.

Written once, by name, for `Node.State`, `Node.Health` and `QueuedResourceState.State` of
the v2 API (google-cloud-tpu `tpu_v2/types/cloud_tpu.py`; descriptions from there). A
test enumerates the client library's enums, so a state it adds cannot go unhandled; a
name the API sends that is not here is handled as UNSEEN: said, and waited on, never
acted on blindly.
"""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
    """What a node's or queued resource's state means for its slot."""

    PENDING = "pending"  # on its way up: wait
    UP = "up"  # serves (the node is READY; the queued resource is ACTIVE)
    BUSY = "busy"  # a transition someone else started (repair, stop, restart): wait, say so
    DEAD = "dead"  # never serves again: its hosts are lost; delete it and make it anew
    STOPPED = "stopped"  # stopped by a person: its hosts are lost; tpuq leaves it to them
    GOING = "going"  # being deleted: wait until it is gone
    UNSEEN = "unseen"  # a state this tpuq does not know

    def __str__(self) -> str:
        return self.value


NODE_STATES: dict[str, Verdict] = {
    "STATE_UNSPECIFIED": Verdict.PENDING,  # "not known/set": seen right after a create
    "CREATING": Verdict.PENDING,
    "READY": Verdict.UP,
    "RESTARTING": Verdict.BUSY,
    "REIMAGING": Verdict.BUSY,
    "DELETING": Verdict.GOING,
    "REPAIRING": Verdict.BUSY,  # "may be unusable"
    "STOPPED": Verdict.STOPPED,
    "STOPPING": Verdict.STOPPED,
    "STARTING": Verdict.PENDING,
    "PREEMPTED": Verdict.DEAD,
    "TERMINATED": Verdict.DEAD,  # maintenance, or the end of a preemptible node's life
    "HIDING": Verdict.BUSY,
    "HIDDEN": Verdict.BUSY,
    "UNHIDING": Verdict.BUSY,
    "UNKNOWN": Verdict.DEAD,  # "unknown state after a failed repair"
}


class Health(str, Enum):
    OK = "ok"
    UNKNOWN = "unknown"
    SICK = "sick"  # unresponsive or its ML stack unhealthy: said in status, not acted on
    MAINTENANCE = "maintenance"  # will resume once rescheduled: its agent gets the notice

    def __str__(self) -> str:
        return self.value


NODE_HEALTH: dict[str, Health] = {
    "HEALTH_UNSPECIFIED": Health.UNKNOWN,  # "not initialized or failed to retrieve"
    "HEALTHY": Health.OK,
    "TIMEOUT": Health.SICK,  # "the resource is unresponsive"
    "UNHEALTHY_TENSORFLOW": Health.SICK,  # "the in-guest ML stack is unhealthy"
    "UNHEALTHY_MAINTENANCE": Health.MAINTENANCE,
}

QUEUED_STATES: dict[str, Verdict] = {
    "STATE_UNSPECIFIED": Verdict.PENDING,
    "CREATING": Verdict.PENDING,  # "being created"
    "ACCEPTED": Verdict.PENDING,  # queued: "accepted and will be provisioned"
    "PROVISIONING": Verdict.PENDING,  # capacity found, the nodes are being made
    "WAITING_FOR_RESOURCES": Verdict.PENDING,  # waits in the queue for capacity
    "ACTIVE": Verdict.UP,
    "FAILED": Verdict.DEAD,  # its failed_data says why (e.g. its window passed)
    "DELETING": Verdict.GOING,
    "SUSPENDING": Verdict.DEAD,  # on its way to SUSPENDED
    "SUSPENDED": Verdict.DEAD,  # "never allocated again": delete it, ask anew
}

# what status says while a queued resource waits in each pending state
QUEUED_WORDS = {"CREATING": "queued resource being created",
                "ACCEPTED": "queued resource accepted, in Google's queue",
                "WAITING_FOR_RESOURCES": "capacity (queued resource waiting for resources)",
                "PROVISIONING": "queued resource provisioning",
                "STATE_UNSPECIFIED": "queued resource (state not reported)"}


def node_verdict(state: str) -> Verdict:
    return NODE_STATES.get(state, Verdict.UNSEEN)


def queued_verdict(state: str) -> Verdict:
    return QUEUED_STATES.get(state, Verdict.UNSEEN)


def health(name: str) -> Health:
    return NODE_HEALTH.get(name, Health.UNKNOWN)
