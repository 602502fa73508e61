"""Failure classification, diagnosis and remedies for finished jobs.

``classify(job_dir, returncode, ...)`` reads what a job left behind (``train.log``'s tail,
``events.jsonl``, ``job.yaml``, the exit record) and returns a :class:`Diagnosis`;
``read_oom_kill_count`` samples the kernel's OOM-kill counter so callers can prove a host OOM.
"""

from lat_core.contract.failure_classes import CLASS_INFO, OOM_CLASSES, FailureClass
from lat_core.triage.classify import classify, classify_files
from lat_core.triage.hostoom import OomCounter, read_oom_kill_count, reread_oom_kill_count
from lat_core.contract.diagnosis import Diagnosis, Remedy
from lat_core.triage.oom import parse_cuda_oom, size_to_bytes
from lat_core.triage.sources import TriageError

__all__ = ["CLASS_INFO", "OOM_CLASSES", "Diagnosis", "FailureClass", "OomCounter", "Remedy", "classify",
           "classify_files", "parse_cuda_oom", "read_oom_kill_count", "reread_oom_kill_count", "size_to_bytes",
           "TriageError"]
