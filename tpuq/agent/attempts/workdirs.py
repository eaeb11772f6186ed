"""A job's files: its logs under TPUQ_HOME, and its checkpoint directory, under TPUQ_HOME
or under the deployment's shared checkpoint root (tpuq/checkpoints.py has the rule).

Job ids start again at 1 in a database that was lost and recreated, so every path
carries the database's random instance id (the `meta` table): `logs/<instance>/` and
`<checkpoints>/<instance>/`. A new database's jobs can never be handed an earlier job's
directory or log, and nothing has to be checked or moved to make sure of it. (A
checkpoint directory from before instance ids, `checkpoints/<job>`, is taken over by
that job when it resumes; a first attempt never touches one.)

Where a job's checkpoints are is recorded by the scheduler with each assignment; this
host makes the directory under its own base, taking only the last part of the recorded
path (the job's id, and the attempt that first used it here after a move): a path in
the database never decides where an agent makes a directory and gives it away.

Modes say whose files are whose: the logs are the agent's alone (users read them
through the agent), a checkpoint directory its job's owner's; the directories above
them let an owner reach their own files (x) but list nobody's.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re

from tpuq import checkpoints

log = logging.getLogger("tpuq.agent")
PASSAGE = 0o711  # reach what is yours, list nothing
# a recorded checkpoint directory's name: `<job>`, or `<job>.<attempt>` after a move
# (compiled once: a pattern with the job's id in it was compiled anew for every job)
_RECORDED = re.compile(r"([0-9]+)(?:\.[0-9]+)?")


class WorkDirs:
    def __init__(self, logs: str, home: str, root: str, instance: str) -> None:
        """`root`: the shared checkpoint root (TPUQ_CHECKPOINT_ROOT), "" for host-local
        checkpoints under `home` (named as the host row names it: its real path)."""
        self.instance = instance
        self.logs = os.path.join(logs, instance[:12] or "unknown")
        self.root = root
        self.checkpoints = checkpoints.base(root or None, os.path.realpath(home), instance)
        self._legacy = checkpoints.local_root(home)
        # a process whose TPUQ_CHECKPOINT_DIR is under one of these was started by an
        # agent of this host's state directory or checkpoint root (holders.started_here)
        self.marks = tuple(dict.fromkeys((
            self._legacy, checkpoints.local_root(os.path.realpath(home)),
            *((checkpoints.base(root, home, instance),) if root else ()))))

    def log_path(self, job_id: int, attempt: int, worker: int | None = None) -> str:
        """A slice job's workers other than 0 each have their own (hosts may share a
        state directory, e.g. over NFS); worker 0's is the job's log."""
        if worker:
            return os.path.join(self.logs, f"{job_id}.{attempt}.w{worker}.log")
        return os.path.join(self.logs, f"{job_id}.{attempt}.log")

    def checkpoint_dir(self, job_id: int, recorded: str | None = None) -> str:
        """TPUQ_CHECKPOINT_DIR: the job's directory under this host's base, named as the
        scheduler recorded it (`<job>`, or `<job>.<attempt>` after a move)."""
        name = (recorded or "").rstrip("/").rsplit("/", 1)[-1]
        named = _RECORDED.fullmatch(name)
        if named is None or named[1] != str(job_id):
            name = str(job_id)
        joined = posixpath.join if checkpoints.is_url(self.checkpoints) else os.path.join
        return joined(self.checkpoints, name)

    def prepare(self, home: str) -> None:
        """At agent start: the directories above every job's, with their modes (raises
        OSError when the checkpoint root cannot be written)."""
        if not os.path.isdir(home):
            os.makedirs(home, mode=0o755)  # the socket lies in it: everyone passes
        for d in (os.path.dirname(self.logs), self.logs, self._legacy):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, PASSAGE)
        if checkpoints.is_url(self.checkpoints):
            return  # a bucket: made by whatever writes it (Orbax, TensorStore)
        os.makedirs(self.checkpoints, exist_ok=True)
        try:
            os.chmod(self.checkpoints, PASSAGE)
        except PermissionError:
            if not self.root:
                raise  # a shared root's directory may be another host's agent's

    def make_checkpoint_dir(self, job_id: int, attempt: int, recorded: str | None = None
                            ) -> str:
        """The job's checkpoint directory, made if missing (its owner's only); a bucket
        URL is left to the job."""
        ckpt = self.checkpoint_dir(job_id, recorded)
        if checkpoints.is_url(ckpt):
            return ckpt
        try:
            os.mkdir(ckpt, 0o700)
        except FileExistsError:
            return ckpt
        legacy = os.path.join(self._legacy, str(job_id))
        if not self.root and os.path.basename(ckpt) == str(job_id) and attempt > 1 \
                and os.path.isdir(legacy) and not os.path.islink(legacy):
            os.rmdir(ckpt)
            os.rename(legacy, ckpt)
            log.info("job %s: took over its checkpoint directory %s", job_id, legacy)
        return ckpt
