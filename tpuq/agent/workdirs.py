"""A job's files under TPUQ_HOME: its logs and its checkpoint directory.

Job ids start again at 1 in a database that was lost and recreated, so every path
carries the database's random instance id (the `meta` table): `logs/<instance>/` and
`checkpoints/<instance>/`. A new database's jobs can never be handed an earlier job's
directory or log, and nothing has to be checked or moved to make sure of it. (A
checkpoint directory from before instance ids, `checkpoints/<job>`, is taken over by
that job when it resumes; a first attempt never touches one.)

Modes say whose files are whose: the logs are the agent's alone (users read them
through the agent), a checkpoint directory its job's owner's; the directories above
them let an owner reach their own files (x) but list nobody's.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("tpuq.agent")
PASSAGE = 0o711  # reach what is yours, list nothing


class WorkDirs:
    def __init__(self, logs: str, checkpoints: str, instance: str) -> None:
        self.instance = instance
        self.logs = os.path.join(logs, instance[:12] or "unknown")
        self.checkpoints = os.path.join(checkpoints, instance[:12] or "unknown")
        self._legacy = checkpoints

    def log_path(self, job_id: int, attempt: int, worker: int | None = None) -> str:
        """A slice job's workers other than 0 each have their own (hosts may share a
        state directory, e.g. over NFS); worker 0's is the job's log."""
        if worker:
            return os.path.join(self.logs, f"{job_id}.{attempt}.w{worker}.log")
        return os.path.join(self.logs, f"{job_id}.{attempt}.log")

    def checkpoint_dir(self, job_id: int) -> str:
        """TPUQ_CHECKPOINT_DIR: one per job, the same for every attempt."""
        return os.path.join(self.checkpoints, str(job_id))

    def prepare(self, home: str) -> None:
        """At agent start: the directories above every job's, with their modes."""
        if not os.path.isdir(home):
            os.makedirs(home, mode=0o755)  # the socket lies in it: everyone passes
        for d in (os.path.dirname(self.logs), self.logs, self._legacy, self.checkpoints):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, PASSAGE)

    def make_checkpoint_dir(self, job_id: int, attempt: int) -> str:
        """The job's checkpoint directory, made if missing (its owner's only)."""
        ckpt = self.checkpoint_dir(job_id)
        try:
            os.mkdir(ckpt, 0o700)
        except FileExistsError:
            return ckpt
        legacy = os.path.join(self._legacy, str(job_id))
        if attempt > 1 and os.path.isdir(legacy) and not os.path.islink(legacy):
            os.rmdir(ckpt)
            os.rename(legacy, ckpt)
            log.info("job %s: took over its checkpoint directory %s", job_id, legacy)
        return ckpt
