"""Hydra launchers that hand each job of a sweep to Slurm (hydra/launcher=slurm) or to submitit's
local executor (hydra/launcher=slurm_local): hydra-submitit-launcher's launchers, plus

- per-job requests: the presets (conf/hydra/launcher/) interpolate the job's own config (nodes =
  distributed.nnodes, GPUs per node = distributed.nproc_per_node, cores and memory per process).
  The plugin resolves them once for the whole sweep; these launchers once per job, and the jobs
  that ask alike go out as one job array;
- multi-node jobs: the task submitit starts on each node runs bench's own per-node launcher as
  that node of the run (node_rank = SLURM_NODEID, the rendezvous on the allocation's first node);
- a sweep that survives its jobs: every job's return is counted in the submitting process
  (bench.tracking.sweep), a job that never returns (cancelled, out of time, its node lost) is a
  failed job with a FAILED child run instead of the end of the multirun, and Ctrl-C or SIGTERM
  cancels the jobs still queued or running;
- each job's final `{"radix_metrics": ...}` line is echoed on the sweep's stdout, as with Hydra's
  basic launcher;
- slurm_local runs its jobs one at a time: a measurement needs the machine to itself.

Imported (through hydra_plugins.bench_launcher, registered by bench.launch.preview) whenever
`python -m bench` starts, when hydra-submitit-launcher (the `slurm` extra) is installed: keep it
light, submitit is imported only when a sweep launches.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, cast

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf, open_dict

from bench.errors import EXIT_FAILED, EXIT_SIGINT, Interrupted, print_error
from bench.machine.children import _die_with_parent_on_exec, sigterm_raises
from bench.tracking import sweep
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

log = logging.getLogger("bench")

EXECUTOR_INIT_KEYS = ("submitit_folder", "max_num_timeout")  # how the plugin splits its keys
RENDEZVOUS_PORT_BASE, RENDEZVOUS_PORT_SPAN = 20000, 10000  # a multi-node job's port: base + job id % span
STATE_CHECK_S = 30  # how often a job's state is asked (and said) while it has no result
FIRST_WORD_S = 2  # a job that ends sooner goes unsaid
# States in which the job's task was stopped from outside and writes no result file: submitit's
# results() would still wait 15 s for one (a slow shared filesystem's lag); FAILED and COMPLETED jobs
# do write one (FAILED: the task's own trace), so those are waited for. INTERRUPTED: a local job's signal.
ENDED_WITHOUT_RESULT = {"CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE", "INTERRUPTED"}


@dataclass
class PlannedJob:
    num: int
    overrides: List[str]
    params: Dict[str, Any]  # what the job asks for: the preset resolved against the job's own config
    job_dir: Path


def node_overrides() -> List[str]:
    """In the task submitit starts on each node of a multi-node Slurm job: the overrides that make
    it that node of the run (none in a one-node job, or outside Slurm). Node 0 holds rank 0 and
    hosts the rendezvous; it writes the job dir's .hydra/, the other nodes only add their rank logs."""
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or 1)
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or nodes < 2:
        return []
    from submitit.slurm.slurm import SlurmJobEnvironment

    node = int(os.environ["SLURM_NODEID"])
    head = SlurmJobEnvironment().hostnames[0]  # SLURM_JOB_NODELIST, expanded: node 0 is the first
    port = RENDEZVOUS_PORT_BASE + int(os.environ["SLURM_JOB_ID"]) % RENDEZVOUS_PORT_SPAN
    overrides = [f"distributed.node_rank={node}", f"distributed.rdzv_endpoint={head}:{port}"]
    return overrides + (["hydra.output_subdir=null"] if node else [])


class SweepLauncher(BaseSubmititLauncher):
    """The launchers' shared code; hydra_plugins.bench_launcher (shipped from launchers/hydra_plugins/)
    names the concrete ones (Hydra instantiates launchers from the hydra_plugins namespace only)."""

    one_at_a_time = False
    cluster = "submitit"
    sweep_context: Optional[str] = None  # bench.tracking.sweep's BENCH_SWEEP: set by launch, pickled with every job

    # ---- in the job's process (on each node) ----------------------------------------------------

    def __call__(
        self,
        sweep_overrides: List[str],
        job_dir_key: str,
        job_num: int,
        job_id: str,
        singleton_state: Dict[type, Singleton],
    ) -> JobReturn:
        # the sweep's context whatever the cluster's environment policy (sbatch --export), and that this
        # process is the job's own: a one-rank job runs in it (bench.launch.launchers.select_launcher)
        os.environ[sweep.SWEEP_ENV] = json.dumps({**json.loads(self.sweep_context or "{}"), "own_process": True})
        return super().__call__(list(sweep_overrides) + node_overrides(), job_dir_key, job_num, job_id, singleton_state)

    # ---- in the submitting process --------------------------------------------------------------

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self.sweep_context = os.environ.get(sweep.SWEEP_ENV)
        jobs = [self._plan(list(overrides), initial_job_idx + i) for i, overrides in enumerate(job_overrides)]
        init = {f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k in EXECUTOR_INIT_KEYS[1:]}
        if self._EXECUTOR == "local":
            import submitit.local.local as local

            if not isinstance(local.subprocess, _ControllersDieWithThisProcess):
                cast(Any, local).subprocess = _ControllersDieWithThisProcess(local.subprocess)  # a module, not a type
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=self.params["submitit_folder"], **init)
        log.info("%s sweep of %d jobs, output in %s", self.cluster, len(jobs), sweep_dir)
        handles: Dict[int, Any] = {}  # job number -> submitit's job, as submitted
        try:
            with sigterm_raises():
                if self.one_at_a_time:
                    returns = []
                    for job in jobs:
                        handles.update(self._submit(executor, [job]))
                        returns.append(self._collect(job, handles[job.num]))
                    return returns
                for group in _grouped(jobs):
                    handles.update(self._submit(executor, group))
                return [self._collect(job, handles[job.num]) for job in jobs]
        except (KeyboardInterrupt, Interrupted) as exc:
            _cancel_unfinished(list(handles.values()))
            code, why = (exc.exit_code, str(exc)) if isinstance(exc, Interrupted) else (EXIT_SIGINT, "Ctrl-C")
            print_error(f"sweep interrupted ({why}): its {self.cluster} jobs still queued or running were cancelled")
            sys.exit(code)  # the parent run ends KILLED (bench.tracking.sweep)

    def _plan(self, overrides: List[str], num: int) -> PlannedJob:
        """The job's config as it will run, and what it asks for, resolved against it."""
        assert self.hydra_context is not None and self.config is not None
        job_cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(job_cfg.hydra.job):
            job_cfg.hydra.job.num = num
        asked = OmegaConf.to_container(job_cfg.hydra.launcher, resolve=True)
        assert isinstance(asked, dict)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        params = {  # a launcher group's keys are names
            (key if key in base else f"{self._EXECUTOR}_{key}"): value
            for key, value in ((str(k), v) for k, v in asked.items())
            if key not in (*EXECUTOR_INIT_KEYS, "_target_")
        }
        job_dir = Path(str(job_cfg.hydra.sweep.dir)) / str(job_cfg.hydra.sweep.subdir)
        log.info("\t#%d : %s", num, " ".join(filter_overrides(overrides)))
        return PlannedJob(num, overrides, params, job_dir)

    def _submit(self, executor: Any, group: List[PlannedJob]) -> Dict[int, Any]:
        """One job array for jobs that ask alike; job number -> submitit's job."""
        executor.update_parameters(**group[0].params)
        state = Singleton.get_state()
        # each job's call of this launcher (__call__'s arguments), as the columns map_array takes
        calls = [(job.overrides, "hydra.sweep.dir", job.num, f"job_id_for_{job.num}", state) for job in group]
        try:
            handles = executor.map_array(self, *(list(column) for column in zip(*calls, strict=True)))
        except Exception as exc:  # submitit's FailedJobError holds sbatch's own words
            said = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            reason = f"{self.cluster} refused the sweep's jobs #{group[0].num}..#{group[-1].num}: {said}"
            print_error(f"{reason} (what each job asks for: hydra.launcher.*, docs/distributed.md)")
            sweep.end_unsubmitted_sweep(reason)
            raise SystemExit(EXIT_FAILED) from None
        return {job.num: handle for job, handle in zip(group, handles, strict=True)}

    def _collect(self, job: PlannedJob, handle: Any) -> JobReturn:
        """The job's return, counted by the sweep; a job that left none is a failed job, not the
        end of the sweep (Hydra's sweeper would raise a FAILED return)."""
        try:
            _wait(handle, f"{self.cluster} job {handle.job_id} (#{job.num})", job.params.get("timeout_min"))
            if _ended_without_result(handle):
                return self._lost(job, self._why_lost(handle, None))
            returned = handle.results()[0]
        except Exception as exc:  # submitit's UncompletedJobError / FailedJobError
            return self._lost(job, self._why_lost(handle, exc))
        if returned.status != JobStatus.COMPLETED:  # bench's task returns its exit code; it raised instead
            return self._lost(job, _raised(returned))
        # the job's `{"radix_metrics": ...}` line (node 0 prints it) on this process's stdout
        if finals := [line for line in (handle.stdout() or "").splitlines() if line.startswith('{"radix_metrics"')]:
            print(finals[-1], flush=True)
        sweep.job_returned(job.num, returned)
        return returned

    def _lost(self, job: PlannedJob, reason: str) -> JobReturn:
        sweep.job_lost(job.num, job.overrides, job.job_dir, reason)
        lost = JobReturn(overrides=job.overrides, status=JobStatus.COMPLETED)
        lost.return_value = EXIT_FAILED
        return lost

    def _why_lost(self, handle: Any, exc: Optional[Exception]) -> str:
        from submitit.core.utils import FailedJobError

        if isinstance(exc, FailedJobError):  # the job's Python raised: the last line of its trace
            trace = str(exc).split("-" * 22)
            lines = [line for line in (trace[1] if len(trace) > 2 else str(exc)).splitlines() if line.strip()]
            return f"{self.cluster} job {handle.job_id} failed: {lines[-1] if lines else type(exc).__name__}"
        return f"{self.cluster} job {handle.job_id} ended {handle.state} without a result"


def _raised(returned: JobReturn) -> str:
    """What a job's task raised, through Hydra's accessor: it re-raises it (and names the overrides on stderr)."""
    try:
        return f"returned {returned.return_value!r}"  # not reached: a return that is not COMPLETED raises
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _wait(handle: Any, job: str, limit_min: Any) -> None:
    """Until the job has ended: its result file, looked for every second, or its state (sacct for
    Slurm) asked every STATE_CHECK_S; submitit alone asks ever less often (up to every 10 min), so
    a job cancelled an hour into a sweep would be seen to end only minutes later. Said after
    FIRST_WORD_S, then every STATE_CHECK_S: the job, its state, how long so far and at most
    (the queue's wait has no bound bench knows of; Ctrl-C cancels the sweep's jobs)."""
    waited = 0
    while not handle.done(force_check=waited > 0 and waited % STATE_CHECK_S == 0):
        if waited == FIRST_WORD_S or (waited > FIRST_WORD_S and waited % STATE_CHECK_S == 0):
            at_most = f"it runs at most {limit_min} min (hydra.launcher.timeout_min)" if limit_min else ""
            log.info("waiting for %s: %s, %d s so far; %s", job, handle.state, waited, at_most or "no time limit")
        time.sleep(1)
        waited += 1


def _ended_without_result(handle: Any) -> bool:
    """Slurm says `CANCELLED by 1000`: its first word is the state."""
    words = str(handle.state).split()
    return bool(words) and words[0] in ENDED_WITHOUT_RESULT and not handle.paths.result_pickle.exists()


def _grouped(jobs: List[PlannedJob]) -> List[List[PlannedJob]]:
    """The jobs that ask alike (the same params), in order: each group goes out as one job array."""
    groups: Dict[str, List[PlannedJob]] = {}
    for job in jobs:
        groups.setdefault(json.dumps(job.params, sort_keys=True, default=str), []).append(job)
    return list(groups.values())


def _cancel_unfinished(handles: List[Any]) -> None:
    for handle in handles:
        try:
            if not handle.done():
                handle.cancel(check=False)
        except Exception as exc:  # cancel the others anyway
            log.warning("could not cancel job %s: %s", getattr(handle, "job_id", "?"), exc)


class _ControllersDieWithThisProcess:
    """submitit.local.local's `subprocess`, but its Popen (the job's controller, which submitit
    "expects to survive the end of the python session") gets SIGTERM when this process dies, even
    by SIGKILL (bench.machine.children: PR_SET_PDEATHSIG); the controller forwards SIGTERM to the
    job, which ends its run KILLED. A SIGKILLed slurm_local sweep left its job training on."""

    def __init__(self, real: Any):
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def Popen(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("preexec_fn", _die_with_parent_on_exec(os.getpid()))
        return self.real.Popen(*args, **kwargs)
