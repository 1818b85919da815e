"""Real torchrun runs of exported notebook-style functions, the SLURM template.

Each torchrun start costs about 10 s of CPU on the 2-core reference machine (an agent, then
fresh interpreters importing torch), so this file starts torchrun once: a function that sets up
its own group (PyTorch's DDP tutorial style, exported with `init_process_group=False`), whose
rank 1 raises after rank 0 has finished; two tests read that run (the torchrun half of
tests/test_real_code.py's item 6, and a failing rank's traceback). What nbval already runs is
not run again here:
- lesson 06 (notebooks/06-backends-and-torchrun.ipynb, sections 3 and 4) runs `torchrun
  --standalone` with the runner's process group (its command line, every rank's RANK,
  LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and GROUP_RANK, the results read back and equal to
  `ddp_lab.launch`'s) and two "nodes" through a c10d rendezvous (GROUP_RANK 0 and 1, one process
  per node, the same results);
- lesson 12 (notebooks/12-debugging-and-fault-tolerance.ipynb, section 6) has a rank SIGKILLed
  after DDP connected both, under `--max-restarts 1`: the restarted ranks meet again on the
  agent's store (torchrun >= 2.5 gives every restart the same store, and env:// no longer
  separates the attempts' keys: a restarted rank could read a peer's address from the attempt
  that crashed, "Connection refused" or a hang, 1 restart in 2 before `run_pickled` prefixed
  its keys per attempt), train on and end with the uninterrupted run's parameters.
Closures shipped by value: tests/test_launch.py (`export` packs functions as `launch` does).

The jobs ask for gloo: their functions use CPU tensors. `auto` would pick NCCL on a machine
with a GPU per local rank, as `ddp_lab.launch` does (tests/gpu runs that).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed.run

import ddp_lab
from ddp_lab.torchrun.scripts import ScriptFailed

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "slurm" / "train.sbatch"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def own_group_then_rank_one_fails(rank, world_size, folder):
    """PyTorch's DDP tutorial style (the function sets up and tears down its own group), then rank 1 raises: only
    once rank 0 has ended, and 1 s later (torchrun looks at its workers every 0.1 s), so that rank 1's error is the
    job's failure only if rank 0 ended with exit code 0."""
    import time

    import psutil
    import torch.distributed as dist

    if rank == 0:
        Path(folder, "rank-0.pid").write_text(str(os.getpid()))
    os.environ.setdefault("MASTER_ADDR", "localhost")   # torchrun set it (and MASTER_PORT): env:// as in the tutorial
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    dist.destroy_process_group()
    if rank == 0:
        return value.item()

    def ended(pid):
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    peer = int(Path(folder, "rank-0.pid").read_text())   # written before rank 0's all_reduce
    deadline = time.monotonic() + 60
    while not ended(peer) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)   # a rank 0 that had failed would have the group stopped by now
    raise ValueError(f"rank one says no (its all_reduce gave {value.item()})")


@pytest.fixture(scope="module")
def own_group_job(tmp_path_factory):
    """(the job, the ScriptFailed it ended with): the one torchrun start of this file, shared by two tests."""
    folder = tmp_path_factory.mktemp("torchrun")
    job = ddp_lab.scripts.export(own_group_then_rank_one_fails, args=(2, str(folder)), path=folder / "job.pkl",
                                 init_process_group=False)
    command = job.torchrun_command("--standalone", "--nproc-per-node", "2")
    assert ddp_lab.scripts.shell(command) == (
        f"torchrun --standalone --nproc-per-node 2 -m ddp_lab.torchrun.run_pickled {shlex.quote(str(job.path))}")
    with pytest.raises(ScriptFailed) as failed:
        ddp_lab.scripts.run([command], env=ONE_THREAD, timeout=120)
    return job, str(failed.value)


@pytest.mark.slow
def test_a_failing_rank_raises_with_its_traceback(own_group_job):
    job, message = own_group_job
    assert re.search(r"(?s)a command failed.*exit code 1.*ValueError: rank one says no", message), message
    with pytest.raises(FileNotFoundError, match=r"ranks \[1\] of 2 wrote no result"):   # rank 0 wrote its own
        job.results()


@pytest.mark.slow
def test_a_self_initialising_function_exports_and_runs_under_torchrun(own_group_job):
    """The runner leaves the group to fn (exported with init_process_group=False), which sets it up from torchrun's
    environment: rank 1's all_reduce in it added both ranks' values; rank 0 returned, its result was written, and it
    ended with exit code 0 (after fn destroyed its group there is no barrier to wait in), or torchrun would have
    stopped rank 1 before its ValueError. The same kind of function under `ddp_lab.launch(...,
    init_process_group=False)` is tests/test_own_process_group.py's (the tutorial's demo_basic, env://)."""
    job, message = own_group_job
    assert "ValueError: rank one says no (its all_reduce gave 3.0)" in message, message
    assert sorted(path.name for path in job.results_dir.iterdir()) == ["rank-0.pkl"]


def test_the_failure_message_shows_every_failed_rank_not_only_the_root_cause():
    """torchrun's summary calls the failure it observed first the root cause; when the failing rank's peer dies in
    a barrier it broke, that is the peer (fresh-clone CI saw it: rank 0's "Connection closed by peer" as root cause,
    rank 1's ValueError under "Failures:" above it). The message keeps both sections. The log is torchrun's
    summary format (torch/distributed/elastic/multiprocessing/errors, ChildFailedError)."""
    from ddp_lab.torchrun.scripts import Finished, _failure_message

    summary = ["worker output", "=" * 60, "ddp_lab.torchrun.run_pickled FAILED", "-" * 60, "Failures:", "[1]:",
               "  rank      : 1 (local_rank: 1)", "  traceback : Traceback (most recent call last):",
               "    ValueError: rank one says no", "-" * 60, "Root Cause (first observed failure):", "[0]:",
               "  rank      : 0 (local_rank: 0)", "  RuntimeError: Connection closed by peer", "=" * 60]
    message = _failure_message([Finished(["torchrun"], 1, "\n".join(summary))], None)
    assert "ValueError: rank one says no" in message and "Root Cause" in message and "worker output" not in message


def test_results_before_running_say_what_to_do(tmp_path):
    job = ddp_lab.scripts.export(lambda rank: rank, path=tmp_path / "idle.pkl")
    with pytest.raises(FileNotFoundError, match="run the torchrun command first"):
        job.results()


def test_runner_without_torchrun_says_how_to_start_it(tmp_path, monkeypatch):
    """What `python -m ddp_lab.torchrun.run_pickled JOB` raises first when torchrun did not start it: its main(), called
    here rather than in a fresh interpreter that would import torch (about 2.5 s of a core) to raise it; the torchrun
    job above runs the same main() through that `-m` and shows a rank's exception in ScriptFailed."""
    from ddp_lab.torchrun.run_pickled import main

    job = ddp_lab.scripts.export(lambda rank: rank, path=tmp_path / "plain.pkl")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)   # (a main() that went on would fail in init_process_group)
    with pytest.raises(RuntimeError, match=r"^RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE not set: start this "
                                           r"script with torchrun \(torchrun --nproc-per-node 2 -m "):
        main([str(job.path)])


def test_run_stops_commands_at_the_timeout():
    with pytest.raises(ScriptFailed, match=r"(?s)did not finish within 0.5 s.*command 0 \(signal SIGTERM \(15\)\).*waiting"):
        ddp_lab.scripts.run([[sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(60)"]],
                            timeout=0.5)


def test_a_failure_waits_for_the_others_to_speak_not_for_a_clock():
    """Commands still running after one failed get up to 2 s to print their side; none left: no wait."""
    with pytest.raises(ScriptFailed, match=r"(?s)command 0 \(exit code 3\).*command 1 \(exit code 0\).*peer gone"):
        ddp_lab.scripts.run([[sys.executable, "-c", "import sys; sys.exit(3)"],
                             [sys.executable, "-c", "import time; time.sleep(0.5); print('peer gone')"]])
    started = time.monotonic()
    with pytest.raises(ScriptFailed, match=r"command 0 \(exit code 3\)"):
        ddp_lab.scripts.run([[sys.executable, "-c", "import sys; sys.exit(3)"]])
    assert time.monotonic() - started < 2.0


def test_torchrun_ranks_resolve_auto_as_launch_does():
    """One rule for `auto` (ddp_lab.launcher.backend.auto_backend): per node under torchrun, per launch in a notebook."""
    from ddp_lab.launcher.backend import choose_backend
    from ddp_lab.hardware.machine import gpu_count
    from ddp_lab.torchrun.run_pickled import resolve_backend

    for local_ranks in (1, 2, gpu_count() + 1):  # on a GPU machine: nccl, then gloo with more ranks than GPUs
        assert resolve_backend("auto", local_ranks) == choose_backend("auto", local_ranks, announce=False)
    assert resolve_backend("auto", gpu_count() + 1) == "gloo"
    assert resolve_backend("gloo", 1) == "gloo"


def test_export_rejects_an_unknown_backend(tmp_path):
    with pytest.raises(ValueError, match="use 'auto', 'gloo' or 'nccl'"):
        ddp_lab.scripts.export(lambda rank: rank, path=tmp_path / "x.pkl", backend="mpi")


def dry_run_template(*script_args: str) -> tuple[list[str], list[str], str]:
    """Run the sbatch template with `scontrol`/`srun` stubbed: (srun options, torchrun argv, OMP threads)."""
    env = {**os.environ, "SLURM_JOB_NODELIST": "gpu-[01-02]", "SLURM_NNODES": "2", "SLURM_JOB_ID": "4242",
           "SLURM_CPUS_PER_TASK": "32"}
    stubs = ('scontrol() { printf "gpu-01\\ngpu-02\\n"; }; '
             'srun() { echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"; printf "%s\\n" "$@"; }; '
             'export -f scontrol srun; exec bash "$0" "$@"')
    done = subprocess.run(["bash", "-c", stubs, str(TEMPLATE), *script_args], env=env,
                          capture_output=True, text=True, check=True, timeout=30)
    threads, *words = done.stdout.splitlines()
    split = words.index("torchrun")
    return words[:split], words[split:], threads


def test_sbatch_template_runs_one_torchrun_per_node_with_c10d():
    srun_options, command, threads = dry_run_template("train.py", "--epochs", "10")
    assert srun_options == ["--cpus-per-task=32"] and threads == "OMP_NUM_THREADS=8"
    args = torch.distributed.run.get_args_parser().parse_args(command[1:])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2", "4", "c10d")
    assert (args.rdzv_endpoint, args.rdzv_id) == ("gpu-01:29500", "4242")
    assert (args.training_script, args.training_script_args) == ("train.py", ["--epochs", "10"])


def test_sbatch_template_header_matches_its_variables():
    text = TEMPLATE.read_text()
    assert "#SBATCH --ntasks-per-node=1" in text  # one torchrun per node
    gpus = next(line.split("=")[1] for line in text.splitlines() if line.startswith("#SBATCH --gpus-per-node="))
    assert f"GPUS_PER_NODE={gpus} " in text
    subprocess.run(["bash", "-n", str(TEMPLATE)], check=True)
