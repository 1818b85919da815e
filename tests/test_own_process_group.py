"""Functions that set up their own process group, as learners bring them from tutorials and mp.spawn scripts.

PyTorch's DDP tutorial writes `setup()` (MASTER_ADDR=localhost, a fixed MASTER_PORT,
`init_process_group("gloo", rank=rank, world_size=world_size)`), `cleanup()`,
`demo_basic` and `demo_checkpoint`; others pass `init_method="tcp://..."`, `"file://..."`,
plain `env://`, or a `TCPStore` of their own as `store=`. Each runs here on real gloo ranks
under `ddp_lab.launch(..., init_process_group=False)` (demo_basic cold and warm, the rest
warm, as a learner's launches start); what cannot work
(a second initialisation, a busy port, a world_size larger than nprocs) fails within
seconds with the fix; and the watchdog's hint says whether stuck ranks wait in the
rendezvous or in a collective. The functions below are this project's own versions.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import textwrap
import time

import cloudpickle
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

import ddp_lab
from ddp_lab import LaunchTimeout, RankFailed
from ddp_lab.launcher.rendezvous import LOOPBACK, OWN_STORE, free_port
from rank_procs import assert_no_ranks_left, listening_sockets

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ship fns by value, as from a notebook

# The tutorial hard-codes "12355"; the tests take a port that was free when this module's tests
# started, so that two test runs on one machine do not collide. It is fixed for the whole module, so
# every launch below reuses it, as a learner re-running the tutorial's cell does. Chosen when the
# first test starts, not at collection: in the minutes between, another worker's gloo connections
# could take it.
TUTORIAL_PORT = ""


@pytest.fixture(scope="module", autouse=True)
def tutorial_port():
    global TUTORIAL_PORT
    TUTORIAL_PORT = str(free_port())
FAST_S = 15.0  # "fails within seconds": far below the watchdog's timeout=60 used in those tests


# --- the tutorial's structure (CPU variant: no .to(rank), no device_ids) -------------------

def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = TUTORIAL_PORT
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def batch(rank):
    """Each rank's own batch, reproducible so that the test can build the reference."""
    generator = torch.Generator().manual_seed(100 + rank)
    return torch.randn(20, 10, generator=generator), torch.randn(20, 5, generator=generator)


def demo_basic(rank, world_size):
    print(f"Running basic DDP example on rank {rank}.")
    setup(rank, world_size)
    torch.manual_seed(0)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    inputs, labels = batch(rank)
    loss_fn(ddp_model(inputs), labels).backward()
    optimizer.step()
    listening = {"rank": listening_sockets(os.getpid()),
                 "launcher": listening_sockets(int(os.environ["DDP_LAB_PARENT_PID"]))}
    cleanup()
    return {name: value.detach().clone() for name, value in model.state_dict().items()}, os.getppid(), listening


def demo_checkpoint(rank, world_size, checkpoint_dir):
    print(f"Running DDP checkpoint example on rank {rank}.")
    setup(rank, world_size)
    model = ToyModel()
    ddp_model = DDP(model)
    checkpoint_path = os.path.join(checkpoint_dir, "model.checkpoint")
    if rank == 0:
        # All processes start from the same parameters (DDP broadcast rank 0's), so saving
        # them in one process is enough.
        torch.save(ddp_model.state_dict(), checkpoint_path)
    dist.barrier()  # the other ranks load only after rank 0 has saved
    ddp_model.load_state_dict(torch.load(checkpoint_path, map_location="cpu", weights_only=True))
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    inputs, labels = batch(rank)
    nn.MSELoss()(ddp_model(inputs), labels).backward()
    optimizer.step()
    if rank == 0:  # backward's all-reduce already synchronised the ranks: every rank has loaded
        os.remove(checkpoint_path)
    cleanup()
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def reference_step(world_size):
    """demo_basic's step in one process: the gradient averaged over the ranks' batches."""
    torch.manual_seed(0)
    model = ToyModel()
    grads = []
    for rank in range(world_size):
        model.zero_grad()
        inputs, labels = batch(rank)
        nn.MSELoss()(model(inputs), labels).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    with torch.no_grad():
        for index, param in enumerate(model.parameters()):
            param -= 0.001 * sum(g[index] for g in grads) / world_size
    return model.state_dict()


@pytest.fixture(params=["cold", "warm"])
def start(request, monkeypatch):
    """Cold: fresh interpreters (DDP_LAB_WARM=0). Warm: ranks forked from the zygote."""
    if request.param == "cold":
        monkeypatch.setenv("DDP_LAB_WARM", "0")
    else:
        ddp_lab.launch(lambda rank: None, nprocs=1)  # leaves a zygote for the next launch
    return request.param


def test_the_tutorials_demo_basic_runs_unchanged(start, capsys):
    results = ddp_lab.launch(demo_basic, args=(2,), nprocs=2, init_process_group=False, timeout=60)
    assert "[rank 1] Running basic DDP example on rank 1." in capsys.readouterr().out
    (state0, parent0, listening), (state1, parent1, _) = results
    expected = reference_step(2)
    for name in expected:
        torch.testing.assert_close(state0[name], expected[name])
        torch.testing.assert_close(state1[name], expected[name])
    forked = parent0 != os.getpid() and parent1 != os.getpid()  # warm ranks are the zygote's children
    assert forked == (start == "warm")
    # What listens where (docs/ddp-lab.md, Safety): rank 0 hosts the tutorial's store on its fixed port,
    # as under mp.spawn, on every interface; ddp_lab's own store stays on 127.0.0.1.
    learner_store = [s for s in listening["rank"] if s[2] == int(TUTORIAL_PORT)]
    assert learner_store and all(s[1] in ("::", "0.0.0.0") for s in learner_store), listening["rank"]
    assert listening["launcher"] and all(s[1] == LOOPBACK for s in listening["launcher"]), listening["launcher"]
    assert_no_ranks_left()


@pytest.fixture
def warm():
    """Ranks forked from the zygote (the learner's default), as `start`'s warm case."""
    ddp_lab.launch(lambda rank: None, nprocs=1)  # leaves a zygote for the next launch


def test_the_tutorials_demo_checkpoint_runs_unchanged(warm, tmp_path):
    """Warm only: how ranks start is what demo_basic proves both ways (cold ranks run a function that sets up its own
    group on the tutorial's port); what this demo adds, a checkpoint saved by rank 0 and loaded by every rank after a
    barrier, does not depend on it. Its cold run cost two more fresh interpreters (8-11 s of CPU here)."""
    first, second = ddp_lab.launch(demo_checkpoint, args=(2, str(tmp_path)), nprocs=2,
                                   init_process_group=False, timeout=60)
    for name in first:
        torch.testing.assert_close(first[name], second[name])  # DDP kept the replicas identical
    assert not any(tmp_path.iterdir())  # rank 0 removed the checkpoint, after every rank had loaded it


def all_reduce_on_a_fixed_port(rank, world_size):
    setup(rank, world_size)
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    cleanup()
    return value.item()


def test_the_same_fixed_port_three_launches_in_a_row():
    """Re-running the tutorial's cell: the port is free again (its old connections in TIME_WAIT are fine)."""
    for _ in range(3):
        assert ddp_lab.launch(all_reduce_on_a_fixed_port, args=(2,), nprocs=2,
                              init_process_group=False, timeout=60) == [3.0, 3.0]


# --- the other ways a function sets up its group -------------------------------------------

def join_own_group(rank, world_size, pattern, where):
    timeout = datetime.timedelta(seconds=60)
    if pattern == "env":  # torchrun style: everything from the environment ddp_lab set
        dist.init_process_group("gloo")
    elif pattern == "tcp":
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{where}", rank=rank, world_size=world_size)
    elif pattern == "file":
        dist.init_process_group("gloo", init_method=f"file://{where}", rank=rank, world_size=world_size)
    elif pattern == "store":  # a TCPStore of its own, hosted by rank 0
        store = dist.TCPStore("127.0.0.1", int(where), world_size, is_master=rank == 0, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    elif pattern == "store-env":  # a TCPStore at MASTER_ADDR:MASTER_PORT, where ddp_lab's store is
        # Rank 0 asks to host it, as under mp.spawn; the launcher already does, and torch then
        # connects rank 0 as a client (TORCHELASTIC_USE_AGENT_STORE, as under torchrun).
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                              is_master=rank == 0, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    listening = [s[2] for s in listening_sockets(os.getpid())]
    cleanup()
    return value.item(), listening, int(os.environ[OWN_STORE].rsplit(":", 1)[1])


@pytest.mark.parametrize("pattern", ["env", "tcp", "file", "store", "store-env"])
def test_every_way_of_setting_up_the_group(pattern, tmp_path):
    where = str(tmp_path / "rendezvous") if pattern == "file" else str(free_port())
    results = ddp_lab.launch(join_own_group, args=(2, pattern, where), nprocs=2,
                             init_process_group=False, timeout=60)
    assert [value for value, _, _ in results] == [3.0, 3.0]
    if pattern in ("tcp", "store"):  # rank 0 hosts the store on the port fn chose, as under mp.spawn
        assert int(where) in results[0][1] and int(where) not in results[1][1]
    own_port = results[0][2]  # the launcher's store: no rank hosts it, whatever fn asked for
    assert all(own_port not in listening for _, listening, _ in results)


# --- what cannot work fails at once, with the fix ------------------------------------------

def test_setup_under_the_default_launch_names_both_fixes():
    started = time.monotonic()
    with pytest.raises(RankFailed) as caught:
        ddp_lab.launch(demo_basic, args=(2,), nprocs=2, timeout=60)  # init_process_group=True
    assert time.monotonic() - started < FAST_S
    message = str(caught.value)
    assert "ddp_lab had already initialised the default process group" in message
    assert "drop your own set-up" in message and "init_process_group=False" in message
    assert_no_ranks_left()


def test_setup_in_a_ddp_cell_names_both_fixes_and_the_cluster_lives_on():
    cell = textwrap.dedent("""
        import os
        def setup(rank, world_size):
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "12355"
            dist.init_process_group("gloo", rank=rank, world_size=world_size)
        setup(rank, world_size)
    """)
    with ddp_lab.Cluster(2, backend="gloo") as cluster:
        with pytest.raises(RankFailed) as caught:
            cluster.run_code(cell, timeout=60)
        message = str(caught.value)
        assert "this cluster's ranks already share a default process group" in message
        assert "drop your own set-up" in message and "init_process_group=False" in message
        assert cluster.run_code("t = torch.ones(1)\ndist.all_reduce(t)\nt.item()") == [2.0, 2.0]


def test_a_ddp_cell_may_replace_the_clusters_group():
    """cleanup() then setup() in %%ddp cells: a new group each time, kept across cells."""
    with ddp_lab.Cluster(2, backend="gloo") as cluster:
        for _ in range(2):  # env:// again at the cluster's own store: fresh keys each time
            cluster.run_code("dist.destroy_process_group()\ndist.init_process_group('gloo')")
            assert cluster.run_code("t = torch.ones(1)\ndist.all_reduce(t)\nt.item()") == [2.0, 2.0]
        cluster.run(lambda rank: (cleanup(), setup(rank, 2)))  # the tutorial's, on its fixed port
        assert cluster.run_code("t = torch.ones(1)\ndist.all_reduce(t)\nt.item()") == [2.0, 2.0]


def init_twice(rank, world_size, pattern):
    """Set up, clean up, set up again: at ddp_lab's store (env://), or on the tutorial's fixed port."""
    for _ in range(2):
        if pattern == "env":
            dist.init_process_group("gloo")
        else:
            setup(rank, world_size)
        value = torch.ones(1)
        dist.all_reduce(value)
        cleanup()
    return value.item()


def test_a_second_group_in_one_function():
    assert ddp_lab.launch(init_twice, args=(2, "env"), nprocs=2, init_process_group=False, timeout=60) == [2.0, 2.0]
    # rank 0 still hosts the first group's store on the fixed port (kept with the destroyed group)
    started = time.monotonic()
    with pytest.raises(RankFailed, match=f"rank 0 already hosts a store on port {TUTORIAL_PORT}.*a port of its own"):
        ddp_lab.launch(init_twice, args=(2, "fixed"), nprocs=2, init_process_group=False, timeout=60)
    assert time.monotonic() - started < FAST_S


def test_a_fixed_port_in_use_fails_at_once():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(RankFailed) as caught:
            ddp_lab.launch(join_own_group, args=(2, "tcp", str(port)), nprocs=2,
                           init_process_group=False, timeout=60)
    assert time.monotonic() - started < FAST_S
    message = str(caught.value)
    assert f"rank 0 could not host the rendezvous store on port {port}" in message
    assert "Choose another MASTER_PORT" in message
    assert_no_ranks_left()


def test_a_world_size_larger_than_nprocs_fails_at_once():
    started = time.monotonic()
    with pytest.raises(RankFailed, match=r"world_size=4\) but ddp_lab started 2 rank\(s\).*Launch with nprocs=4"):
        ddp_lab.launch(all_reduce_on_a_fixed_port, args=(4,), nprocs=2, init_process_group=False, timeout=60)
    assert time.monotonic() - started < FAST_S


# --- the watchdog tells a rendezvous wait from a collective wait ---------------------------

def only_rank_0_joins(rank, world_size, port):
    if rank == 0:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)


def only_rank_0_reduces(rank, world_size):
    dist.init_process_group("gloo")
    if rank == 0:
        dist.all_reduce(torch.ones(1))


def test_the_watchdog_tells_a_rendezvous_from_a_collective():
    with pytest.raises(LaunchTimeout) as waiting_to_join:
        ddp_lab.launch(only_rank_0_joins, args=(2, free_port()), nprocs=2, init_process_group=False, timeout=2)
    hint = waiting_to_join.value.hint
    assert "rank(s) 0 wait inside init_process_group for every rank to join" in hint
    assert "a rank that never calls init_process_group" in hint and "in a collective" not in hint

    with pytest.raises(LaunchTimeout) as waiting_in_all_reduce:
        ddp_lab.launch(only_rank_0_reduces, args=(2,), nprocs=2, init_process_group=False, timeout=2)
    hint = waiting_in_all_reduce.value.hint
    assert "rank(s) 0 wait in a collective" in hint and "another rank skipped" in hint
    assert "init_process_group" not in hint
    assert_no_ranks_left()
