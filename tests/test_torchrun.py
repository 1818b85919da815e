"""Real torchrun runs of exported notebook-style functions, the two-node rendezvous, the SLURM template.

Each torchrun start costs a few seconds (an agent, then fresh interpreters importing torch),
so there are four: a standalone run, a two-node run (two agents), a failing run and a run
restarted after a crash.

The jobs ask for gloo: their functions use CPU tensors. `auto` would pick NCCL on a machine
with a GPU per local rank, as `ddp_lab.launch` does (tests/gpu runs that), and the two
"nodes" here share one machine's GPUs, which NCCL refuses.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.run

import ddp_lab
from ddp_lab.torchrun.scripts import ScriptFailed

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "slurm" / "train.sbatch"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def make_step(scale):
    """A closure, as a notebook cell would define it: shipped by value, not by reference."""
    def step(rank):
        import torch.distributed as dist

        value = torch.tensor([float(rank + 1)]) * scale
        dist.all_reduce(value)
        names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
        return {"sum": value, "backend": dist.get_backend(), "env": {n: os.environ[n] for n in names}}
    return step


@pytest.mark.slow
def test_standalone_torchrun_gives_what_launch_gives(tmp_path):
    step = make_step(10.0)
    job = ddp_lab.scripts.export(step, path=tmp_path / "step.pkl", backend="gloo")
    command = job.torchrun_command("--standalone", "--nproc-per-node", "2")
    assert ddp_lab.scripts.shell(command) == (
        f"torchrun --standalone --nproc-per-node 2 -m ddp_lab.torchrun.run_pickled {shlex.quote(str(job.path))}")
    (finished,) = ddp_lab.scripts.run([command], env=ONE_THREAD)
    assert finished.returncode == 0
    under_torchrun = job.results()
    under_launch = ddp_lab.launch(step, nprocs=2, backend="gloo")
    assert len(under_torchrun) == 2
    for rank, (a, b) in enumerate(zip(under_torchrun, under_launch)):
        torch.testing.assert_close(a["sum"], b["sum"])
        assert a["sum"].item() == 30.0 and a["backend"] == "gloo"
        assert a["env"] == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                            "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"} == b["env"]


@pytest.mark.slow
def test_two_nodes_meet_through_a_c10d_rendezvous(tmp_path):
    job = ddp_lab.scripts.export(make_step(1.0), path=tmp_path / "nodes.pkl", backend="gloo")
    endpoint = f"127.0.0.1:{ddp_lab.scripts.free_port()}"
    commands = [
        job.torchrun_command("--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node),
                             "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "test06",
                             "--rdzv-conf", f"is_host={int(node == 0)}")
        for node in (0, 1)
    ]
    runs = ddp_lab.scripts.run(commands, env=ONE_THREAD)
    assert [run.returncode for run in runs] == [0, 0]
    results = job.results()
    assert [r["sum"].item() for r in results] == [3.0, 3.0]
    for rank, result in enumerate(results):
        assert result["env"] == {"RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2",
                                 "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank)}


def fail_on_rank_one(rank):
    if rank == 1:
        raise ValueError("rank one says no")
    import torch.distributed as dist

    dist.barrier()
    return rank


@pytest.mark.slow
def test_a_failing_rank_raises_with_its_traceback(tmp_path):
    job = ddp_lab.scripts.export(fail_on_rank_one, path=tmp_path / "fail.pkl", backend="gloo")
    with pytest.raises(ScriptFailed, match=r"(?s)a command failed.*exit code 1.*ValueError: rank one says no"):
        ddp_lab.scripts.run([job.torchrun_command("--standalone", "--nproc-per-node", "2")],
                            env=ONE_THREAD, timeout=120)
    with pytest.raises(FileNotFoundError, match=r"ranks \[1\] of 2 wrote no result|no results"):
        job.results()


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


def killed_on_the_first_two_attempts(rank):
    import signal

    import torch.distributed as dist

    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    value = torch.ones(1)
    dist.all_reduce(value)  # both ranks connected: their addresses are in torchrun's store
    if rank == 1 and attempt < 2:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(value)
    return attempt, value.item()


@pytest.mark.slow
def test_restarted_ranks_meet_again_on_the_agents_store(tmp_path):
    # torchrun >= 2.5 gives every restart the same store and env:// no longer separates the attempts'
    # keys: a restarted rank could read a peer's address from the attempt that crashed ("Connection
    # refused", or a hang; 1 restart in 2 here). The runner prefixes its keys per attempt.
    job = ddp_lab.scripts.export(killed_on_the_first_two_attempts, path=tmp_path / "restart.pkl", backend="gloo")
    (finished,) = ddp_lab.scripts.run(
        [job.torchrun_command("--standalone", "--nproc-per-node", "2", "--max-restarts", "2")],
        env=ONE_THREAD, timeout=120)
    assert finished.returncode == 0
    assert job.results() == [(2, 4.0), (2, 4.0)]


def test_results_before_running_say_what_to_do(tmp_path):
    job = ddp_lab.scripts.export(lambda rank: rank, path=tmp_path / "idle.pkl")
    with pytest.raises(FileNotFoundError, match="run the torchrun command first"):
        job.results()


def test_runner_without_torchrun_says_how_to_start_it(tmp_path):
    job = ddp_lab.scripts.export(lambda rank: rank, path=tmp_path / "plain.pkl")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    done = subprocess.run([sys.executable, *job.script_args()], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE not set: start this script with torchrun" in done.stderr


def test_run_stops_commands_at_the_timeout():
    with pytest.raises(ScriptFailed, match=r"(?s)did not finish within 0.5 s.*command 0 \(signal SIGTERM \(15\)\).*waiting"):
        ddp_lab.scripts.run([[sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(60)"]],
                            timeout=0.5)


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
