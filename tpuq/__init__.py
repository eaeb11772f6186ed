"""tpuq: a job queue for teams sharing Cloud TPU VMs.

Kept import-light on purpose: `from tpuq import job` runs inside training scripts and
must not pull in SQLAlchemy, Celery or JAX.
"""

__version__ = "0.1.0"
