"""The lesson 06 checks accept right answers and reject plausible wrong ones with specific feedback.

Each wrong answer is a mistake a learner is likely to make; the test pins the part of the
feedback that names it. The first two checks are pure functions (no processes); the
third launches 2 gloo ranks (about 1.5 s each, one deadlocking answer waits for the timeout).
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
from torch.distributed import init_process_group

from ddp_lab.checks import CheckFailed, lesson06
from ddp_lab.checks.lesson06 import check_device_and_ddp_kwargs, check_pick_backend, check_setup_from_env

# The right answers are proven once, by nbval of solutions/06-*.ipynb (its check cells store ✓):
# this file tries the wrong ones and the cases the solution does not cover.

DEADLOCK_TIMEOUT = 2.0   # seconds after every rank entered the answer (start-up has its own allowance)


# --- exercise 1: pick_backend -------------------------------------------------------------

def pick_backend(gpus, nprocs_per_node, nccl_available):
    """Right answer."""
    return "nccl" if nccl_available and gpus > 0 and gpus >= nprocs_per_node else "gloo"


def pick_any_gpu(gpus, nprocs_per_node, nccl_available):
    """Wrong: NCCL as soon as there is a GPU, even with two processes per GPU."""
    return "nccl" if nccl_available and gpus > 0 else "gloo"


def pick_ignores_build(gpus, nprocs_per_node, nccl_available):
    """Wrong: forgets that the torch build may lack NCCL."""
    return "nccl" if gpus >= nprocs_per_node and gpus > 0 else "gloo"


def pick_when_built(gpus, nprocs_per_node, nccl_available):
    """Wrong: NCCL whenever it is built in (a CUDA torch on a machine without GPUs)."""
    return "nccl" if nccl_available else "gloo"


def pick_not_written(gpus, nprocs_per_node, nccl_available):
    raise NotImplementedError("NCCL needs NCCL built in")


def pick_without_a_return_for_gloo(gpus, nprocs_per_node, nccl_available):
    """Wrong: the gloo branch prints instead of returning (None), which is no machine's mistake about GPUs."""
    if nccl_available and gpus > 0 and gpus >= nprocs_per_node:
        return "nccl"
    print("gloo")


def pick_returns_whether_nccl(gpus, nprocs_per_node, nccl_available):
    """Wrong: a bool, whether NCCL can run, instead of the backend's name."""
    return nccl_available and gpus > 0 and gpus >= nprocs_per_node


def pick_gpus_a_multiple(gpus, nprocs_per_node, nccl_available):
    """Wrong: NCCL only where the GPUs split evenly among the processes (6 GPUs for 4 processes can run it too)."""
    return "nccl" if nccl_available and gpus > 0 and gpus % nprocs_per_node == 0 else "gloo"


def pick_returns_the_device(gpus, nprocs_per_node, nccl_available):
    """Wrong: the device type instead of the backend."""
    return "cuda" if nccl_available and gpus > 0 and gpus >= nprocs_per_node else "cpu"


def pick_backend_in_capitals(gpus, nprocs_per_node, nccl_available):
    return pick_backend(gpus, nprocs_per_node, nccl_available).upper()   # torch takes "GLOO" as "gloo"


@pytest.mark.parametrize("answer", [pick_backend, pick_backend_in_capitals])
def test_pick_backend_accepts_the_right_answer(answer, capsys):
    check_pick_backend(answer)
    assert capsys.readouterr().out.startswith("✓ pick_backend")


@pytest.mark.parametrize("wrong, feedback", [
    (pick_any_gpu, r"gpus=1, nprocs_per_node=2, nccl_available=True\) returned 'nccl'.*refuses two ranks on one GPU"),
    (pick_ignores_build, r"nccl_available=False\) returned 'nccl'.*torch without NCCL"),
    (pick_when_built, r"gpus=0, nprocs_per_node=4, nccl_available=True\) returned 'nccl'.*no GPU to run it on"),
    (pick_gpus_a_multiple, r"gpus=6, nprocs_per_node=4, nccl_available=True\) returned 'gloo'.*no multiple"),
    (pick_not_written, r"pick_backend is not written yet.*NCCL needs NCCL built in"),
    # a result of the wrong kind is named as such, not with the first machine's reason for gloo
    (pick_without_a_return_for_gloo, r"^pick_backend\(gpus=0, nprocs_per_node=2, nccl_available=False\) returned "
                                     r"None, expected 'gloo'\.\nHint: a function that ends without a return "
                                     r"statement on this path \(or prints its answer\) returns None"),
    (pick_returns_whether_nccl, r"^pick_backend\(gpus=0, .*\) returned bool False, expected the string 'gloo': "
                                r"pick_backend returns the name of a backend, 'nccl' or 'gloo'\.$"),
    (pick_returns_the_device, r"^pick_backend\(gpus=0, .*\) returned 'cpu', expected 'gloo'\.\nHint: 'cpu' names a "
                              r"device; pick_backend returns a backend"),
])
def test_pick_backend_rejects(wrong, feedback):
    with pytest.raises(CheckFailed, match=f"(?s){feedback}"):
        check_pick_backend(wrong)


# --- exercise 2: device_and_ddp_kwargs ---------------------------------------------------------

def device_and_ddp_kwargs(backend):
    """Right answer."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    local_rank = int(os.environ["LOCAL_RANK"])
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_from_rank(backend):
    """Wrong: the global RANK picks the GPU."""
    rank = int(os.environ["RANK"])
    return (torch.device("cuda", rank), {"device_ids": [rank]}) if backend == "nccl" else (torch.device("cpu"), {})


def device_ids_on_cpu(backend):
    """Wrong: device_ids for the gloo/CPU model too."""
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    return device, {"device_ids": [local_rank]}


def cuda_without_index(backend):
    """Wrong: plain "cuda" (every rank on GPU 0 unless set_device was called)."""
    local_rank = int(os.environ["LOCAL_RANK"])
    return (torch.device("cuda"), {"device_ids": [local_rank]}) if backend == "nccl" else (torch.device("cpu"), {})


def device_ids_not_a_list(backend):
    """Wrong: device_ids=local_rank instead of [local_rank]."""
    local_rank = int(os.environ["LOCAL_RANK"])
    return (torch.device("cuda", local_rank), {"device_ids": local_rank}) if backend == "nccl" else (torch.device("cpu"), {})


def device_ids_strings(backend):
    """Wrong: forgets int() on the environment variable."""
    local_rank = os.environ["LOCAL_RANK"]
    return (torch.device(f"cuda:{local_rank}"), {"device_ids": [local_rank]}) if backend == "nccl" else (torch.device("cpu"), {})


def gpu_for_gloo(backend):
    """Wrong: always the GPU."""
    local_rank = int(os.environ["LOCAL_RANK"])
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]} if backend == "nccl" else {}


def device_from_node_index(backend):
    """Wrong: the node's index (the same for every process of the node) picks the GPU."""
    node = int(os.environ["RANK"]) // int(os.environ["LOCAL_WORLD_SIZE"])
    return (torch.device("cuda", node), {"device_ids": [node]}) if backend == "nccl" else (torch.device("cpu"), {})


def device_ids_from_rank(backend):
    """Wrong: the right device, but device_ids from RANK."""
    local_rank, rank = int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"])
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", local_rank), {"device_ids": [rank]}


def device_ids_as_devices(backend):
    """Right: DDP takes torch.device entries in device_ids too."""
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else torch.device("cpu")
    return device, ({"device_ids": [device]} if backend == "nccl" else {})


def returns_only_device(backend):
    """Wrong: forgets the DDP keyword arguments."""
    return torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else torch.device("cpu")


def device_from_rank_mod_4(backend):
    """Wrong: the local rank computed from RANK with a node of 4 processes written in (right on such nodes only)."""
    local_rank = int(os.environ["RANK"]) % 4
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_from_rank_minus_the_nodes_before(backend):
    """Wrong: RANK less 4 processes for every node before this one (4 written in)."""
    local_rank = int(os.environ["RANK"]) - 4 * int(os.environ["GROUP_RANK"])
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_ids_from_rank_mod_4(backend):
    """Wrong: the right device, but device_ids from RANK % 4."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", int(os.environ["LOCAL_RANK"])), {"device_ids": [int(os.environ["RANK"]) % 4]}


def device_from_rank_mod_2(backend):
    """Wrong: RANK % 2, a node of 2 processes written in."""
    local_rank = int(os.environ["RANK"]) % 2
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_from_rank_mod_8(backend):
    """Wrong: RANK % 8, a node of 8 processes written in."""
    local_rank = int(os.environ["RANK"]) % 8
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_written_in(backend):
    """Wrong: the GPU of the one process the learner had in mind."""
    return (torch.device("cuda", 2), {"device_ids": [2]}) if backend == "nccl" else (torch.device("cpu"), {})


def device_from_rank_mod_gpu_count(backend):
    """Wrong: RANK modulo the GPUs this machine has (none where the check runs)."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    local_rank = int(os.environ["RANK"]) % torch.cuda.device_count()
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_one_below_the_local_rank(backend):
    """Wrong: LOCAL_RANK - 1 (GPUs counted from 1). Global rank 6 gets GPU 1, its node's index there, but not as rank 29
    (GPU 4 on node 3): the node's index is not named; nor RANK % 5, which gives both by chance."""
    local_rank = int(os.environ["LOCAL_RANK"]) - 1
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_from_rank_mod_the_node_size(backend):
    """Right where every node runs the same number of processes (one --nproc-per-node for all)."""
    local_rank = int(os.environ["RANK"]) % int(os.environ["LOCAL_WORLD_SIZE"])
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_as_a_string(backend):
    """Wrong: the device named by a string, which the training function after the exercise asks its .type."""
    local_rank = int(os.environ["LOCAL_RANK"])
    return (f"cuda:{local_rank}", {"device_ids": [local_rank]}) if backend == "nccl" else ("cpu", {})


def device_and_ddp_kwargs_as_a_list(backend):
    """Right too: a list of the two unpacks as the tuple does (`device, ddp_kwargs = ...`)."""
    return list(device_and_ddp_kwargs(backend))


@pytest.mark.parametrize("answer", [device_and_ddp_kwargs, device_ids_as_devices,
                                    device_from_rank_mod_the_node_size, device_and_ddp_kwargs_as_a_list])
def test_device_and_ddp_kwargs_accepts_the_right_answer(answer, capsys):
    check_device_and_ddp_kwargs(answer)
    assert capsys.readouterr().out.startswith("✓ device_and_ddp_kwargs")


@pytest.mark.parametrize("wrong, feedback", [
    (device_from_rank, r"chose cuda:6 .*that is RANK.*use LOCAL_RANK"),
    (device_from_node_index, r"chose cuda:1 .*expected cuda:2.*this node's index"),
    (device_ids_from_rank, r"device_ids=\[6\] .*expected \[2\].*that is RANK"),
    (device_ids_on_cpu, r"\('gloo'\) returned ddp_kwargs=\{'device_ids': \[2\]\}.*refuses device_ids"),
    (cuda_without_index, r"chose cuda \(no index\).*torch.device\('cuda', local_rank\)"),
    (device_ids_not_a_list, r"device_ids=2; DDP wants a list"),
    (device_ids_strings, r"device_ids=\['2'\] \(strings\).*int\(os.environ\['LOCAL_RANK'\]\)"),
    (gpu_for_gloo, r"\('gloo'\) chose cuda:2, expected cpu"),
    (returns_only_device, r"expected a pair \(device, ddp_kwargs\)"),
    (device_as_a_string, r"^device_and_ddp_kwargs\('gloo'\) returned the device as 'cpu', a str, not a torch.device: "
                         r".*\(device.type\).*Hint: return a torch.device, not its name: torch.device\('cpu'\)\.$"),
    # right as global rank 6 on a node of 4, wrong as global rank 29 on a node of 8
    (device_from_rank_mod_4, r"^device_and_ddp_kwargs\('nccl'\) chose cuda:1 \(as global rank 29 = local rank 5 on "
                             r"node 3, 8 processes per node\), expected cuda:5; as global rank 6 = local rank 2 on "
                             r"node 1, 4 processes per node, it chose cuda:2, right\.\nHint: 1 is RANK % 4"),
    (device_from_rank_minus_the_nodes_before, r"^device_and_ddp_kwargs\('nccl'\) chose cuda:17 \(as global rank 29 .*"
                                              r"expected cuda:5; .*\nHint: 17 is RANK less 4 processes for each node "
                                              r"before this one"),
    (device_ids_from_rank_mod_4, r"^device_and_ddp_kwargs\('nccl'\) returned device_ids=\[1\] \(as global rank 29 .*"
                                 r"expected \[5\].*\nHint: 1 is RANK % 4"),
    (device_from_rank_mod_2, r"^device_and_ddp_kwargs\('nccl'\) chose cuda:0 \(as global rank 6 = local rank 2 on "
                             r"node 1, 4 processes per node\), expected cuda:2\.\nHint: 0 is RANK % 2: a node size "
                             r"of 2 written in the code, right on nodes of 2 processes only\. torchrun gives each "
                             r"process its index on its node in LOCAL_RANK"),
    (device_from_rank_mod_8, r"^device_and_ddp_kwargs\('nccl'\) chose cuda:6 \(as global rank 6 .*expected cuda:2\.\n"
                             r"Hint: 6 is RANK % 8: a node size of 8 written"),
    (device_one_below_the_local_rank, r"^device_and_ddp_kwargs\('nccl'\) chose cuda:1 \(as global rank 6 = local rank "
                                      r"2 on node 1, 4 processes per node\), expected cuda:2\.\nHint: the GPU is this "
                                      r"process's index on its node, LOCAL_RANK as torchrun sets it.*as it is\.$"),
    (device_written_in, r"^device_and_ddp_kwargs\('nccl'\) chose cuda:2 \(as global rank 29 .*expected cuda:5; as "
                        r"global rank 6 = local rank 2 on node 1, 4 processes per node, it chose cuda:2, right\.\n"
                        r"Hint: right on a node of 4 processes, wrong on one of 8\. torchrun gives"),
])
def test_device_and_ddp_kwargs_rejects(wrong, feedback):
    with pytest.raises(CheckFailed, match=f"(?s){feedback}"):
        check_device_and_ddp_kwargs(wrong)


def device_sets_the_device(backend):
    """Wrong here: calls torch.cuda.set_device itself (the exercise leaves it to the caller)."""
    if backend == "nccl":
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), {"device_ids": [local_rank]}
    return torch.device("cpu"), {}


def setup_sets_the_device(backend):
    """Wrong: calls torch.cuda.set_device before the group, on every backend (fails where there is no GPU)."""
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return setup_from_env(backend)


@pytest.mark.skipif(torch.cuda.is_available(), reason="set_device works where a GPU is")
def test_set_device_without_a_gpu_is_named_in_both_checks():
    """A torch.cuda.set_device call where no GPU is raises torch's AttributeError (CPU-only builds) or RuntimeError (a
    CUDA build without a driver: 'Found no NVIDIA driver'): each check says what it needs and whose job the exercise
    makes it, not only what torch raised."""
    hint = (r"\nHint: torch\.cuda\.set_device needs a GPU, and this machine has none: the exercise leaves it to the "
            r"caller")
    with pytest.raises(CheckFailed, match=r"(?s)^device_and_ddp_kwargs raised \w+: .*" + hint):
        check_device_and_ddp_kwargs(device_sets_the_device)
    with pytest.raises(CheckFailed, match=r"(?s)rank \d failed while running setup_from_env.*set_device.*" + hint):
        check_setup_from_env(setup_sets_the_device)


def test_device_and_ddp_kwargs_names_a_modulo_by_the_machines_gpu_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)   # as on the CPU machines the check runs on
    with pytest.raises(CheckFailed, match=r"(?s)^device_and_ddp_kwargs raised ZeroDivisionError.*\nHint: .*"
                                          r"torch.cuda.device_count\(\) \(% divides too\), which is 0 where "
                                          r"no GPU is visible.*LOCAL_RANK"):
        check_device_and_ddp_kwargs(device_from_rank_mod_gpu_count)


def device_ids_empty_on_cpu(backend):
    """Right: DDP takes device_ids=[] for a module on the CPU as it takes None (kept for backward compatibility)."""
    ids = [int(os.environ["LOCAL_RANK"])] if backend == "nccl" else []
    return (torch.device("cuda", ids[0]) if ids else torch.device("cpu")), {"device_ids": ids}


def output_device_on_cpu(backend):
    """Wrong: an output_device for the gloo/CPU model."""
    if backend != "nccl":
        return torch.device("cpu"), {"device_ids": None, "output_device": int(os.environ["LOCAL_RANK"])}
    return device_and_ddp_kwargs(backend)


def output_device_string(backend):
    """Wrong: output_device straight from the environment (a string, which DDP reads as a device name)."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    local_rank = int(os.environ["LOCAL_RANK"])
    return torch.device("cuda", local_rank), {"device_ids": [local_rank], "output_device": os.environ["LOCAL_RANK"]}


def device_index_string(backend):
    """Wrong: the environment's string as torch.device's index."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    return torch.device("cuda", os.environ["LOCAL_RANK"]), {"device_ids": [int(os.environ["LOCAL_RANK"])]}


def device_index_string_through_a_name(backend):
    """Wrong: the environment's string, kept in a name, as torch.device's index."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    local_rank = os.environ["LOCAL_RANK"]
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def device_from_the_current_device(backend):
    """Wrong: the current CUDA device, GPU 0 for every process until set_device (and no GPU where the check runs)."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    index = torch.cuda.current_device()
    return torch.device("cuda", index), {"device_ids": [index]}


def device_from_get_rank(backend):
    """Wrong: dist.get_rank(), the global rank (and no process group where the check runs)."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    index = dist.get_rank()
    return torch.device("cuda", index), {"device_ids": [index]}


def test_device_and_ddp_kwargs_accepts_an_empty_device_ids_on_cpu(capsys):
    check_device_and_ddp_kwargs(device_ids_empty_on_cpu)
    assert capsys.readouterr().out.startswith("✓ device_and_ddp_kwargs")


@pytest.mark.parametrize("wrong, feedback", [
    (output_device_on_cpu, r"^device_and_ddp_kwargs\('gloo'\) returned ddp_kwargs=\{'device_ids': None, "
                           r"'output_device': 2\}, expected \{\}\.\nHint: output_device names the GPU"),
    (output_device_string, r"^device_and_ddp_kwargs\('nccl'\) returned output_device='2' \(as global rank 6 .*\), a "
                           r"string, which DDP reads as a device name .*\nHint: environment variables are strings"),
    (device_index_string, r"^device_and_ddp_kwargs raised TypeError: .*str.*\nHint: environment variables are "
                          r"strings.*int\(os.environ\['LOCAL_RANK'\]\)\.$"),
    (device_index_string_through_a_name, r"^device_and_ddp_kwargs raised TypeError: .*str.*\nHint: environment "
                                         r"variables are strings"),
    # torch's errors name a CUDA build and a process group: the hint says what the call gives in a job instead
    (device_from_the_current_device, r"^device_and_ddp_kwargs raised \w+: .*\nwhile calling device_and_ddp_kwargs\("
                                     r"'nccl'\).*\nHint: torch.cuda.current_device\(\) needs a GPU.*GPU 0 until the "
                                     r"caller's set_device runs, the same for every process on the node.*LOCAL_RANK"),
    (device_from_get_rank, r"^device_and_ddp_kwargs raised ValueError: Default process group has not been "
                           r"initialized.*\nHint: dist.get_rank\(\) needs a process group, and the check calls the "
                           r"function without one; in a job it is the global rank \(RANK\).*LOCAL_RANK"),
])
def test_device_and_ddp_kwargs_names_the_wrong_value(wrong, feedback):
    with pytest.raises(CheckFailed, match=f"(?s){feedback}"):
        check_device_and_ddp_kwargs(wrong)


def device_from_local_rank_mod_gpu_count(backend):
    """LOCAL_RANK modulo the GPUs this machine has (none where the check runs): the % is not needed."""
    if backend != "nccl":
        return torch.device("cpu"), {}
    local_rank = int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()
    return torch.device("cuda", local_rank), {"device_ids": [local_rank]}


def test_device_and_ddp_kwargs_a_modulo_of_local_rank_by_the_gpu_count_is_not_told_to_read_local_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(CheckFailed, match=r"(?s)^device_and_ddp_kwargs raised ZeroDivisionError.*\nHint: the line "
                                          r"that raised divides by torch.cuda.device_count\(\).*LOCAL_RANK alone is "
                                          r"the GPU index torchrun means.*no % needed\.$") as failed:
        check_device_and_ddp_kwargs(device_from_local_rank_mod_gpu_count)
    assert "read it from the environment" not in str(failed.value)


def test_device_check_restores_the_environment():
    before = {name: os.environ.get(name) for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    with pytest.raises(CheckFailed):
        check_device_and_ddp_kwargs(device_from_rank)
    assert {name: os.environ.get(name) for name in before} == before


# --- exercise 3: setup_from_env (2 real ranks) ----------------------------------------------

def setup_from_env(backend):
    """Right answer."""
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    return {"rank": rank, "local_rank": local_rank, "world_size": world_size}


def torchruns_numbers():
    return {"rank": int(os.environ["RANK"]), "local_rank": int(os.environ["LOCAL_RANK"]),
            "world_size": int(os.environ["WORLD_SIZE"])}


def setup_reads_only(backend):
    """Wrong: reads the variables but never creates the process group."""
    return {"rank": int(os.environ["RANK"]), "local_rank": int(os.environ["LOCAL_RANK"]),
            "world_size": int(os.environ["WORLD_SIZE"])}


def setup_local_from_rank(backend):
    """Wrong: local rank taken from RANK (right on one node, wrong on the second)."""
    dist.init_process_group(backend)
    rank = int(os.environ["RANK"])
    return {"rank": rank, "local_rank": rank, "world_size": int(os.environ["WORLD_SIZE"])}


def setup_local_from_the_node(backend):
    """Wrong: local_rank read from GROUP_RANK, the node's index (1 on the second node, as RANK there)."""
    info = setup_from_env(backend)
    return {**info, "local_rank": int(os.environ.get("GROUP_RANK", 0))}


def setup_strings(backend):
    """Wrong: returns the environment strings."""
    dist.init_process_group(backend)
    return {"rank": os.environ["RANK"], "local_rank": os.environ["LOCAL_RANK"], "world_size": os.environ["WORLD_SIZE"]}


def setup_nccl(backend):
    """Wrong: NCCL whatever the caller asks for, through a variable of its own (which the source check cannot
    follow: it reaches the ranks, and fails on a machine without NCCL)."""
    chosen = "nccl"
    dist.init_process_group(chosen)
    return setup_reads_only(backend)


def setup_backend_from_cuda(backend):
    """Wrong: chooses the backend itself instead of taking the caller's."""
    dist.init_process_group("nccl" if torch.cuda.is_available() else dist.Backend.GLOO)
    return torchruns_numbers()


def setup_backend_from_the_environment(backend):
    dist.init_process_group(backend=os.environ.get("BACKEND", "gloo"))
    return torchruns_numbers()


def setup_gloo_hard_coded(backend):
    """Wrong: gloo whatever the caller asks for (passes on CPU, the one backend this check can run)."""
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return {"rank": rank, "local_rank": local_rank, "world_size": world_size}


def setup_nccl_as_keyword(backend):
    dist.init_process_group(backend="nccl")
    return torchruns_numbers()


def setup_only_on_rank_0(backend):
    """Wrong: only rank 0 creates the group, so it waits forever for rank 1 to join."""
    rank = int(os.environ["RANK"])
    if rank == 0:
        dist.init_process_group(backend)
    return {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}


def setup_rank_from_local_rank(backend):
    """Wrong: the local rank for the rank (0 on both nodes)."""
    local_rank, world_size = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, rank=local_rank, world_size=world_size)
    return {"rank": local_rank, "local_rank": local_rank, "world_size": world_size}


def setup_passes_strings(backend):
    """Wrong: the environment's strings passed on as they are."""
    dist.init_process_group(backend, rank=os.environ["RANK"], world_size=os.environ["WORLD_SIZE"])
    return setup_reads_only(backend)


def setup_world_size_written(backend):
    """Wrong: a world size written in the code (the job's is 2)."""
    dist.init_process_group(backend, rank=int(os.environ["RANK"]), world_size=4)
    return setup_reads_only(backend)


def setup_world_size_written_as_2(backend):
    """Wrong: the check's world size written in the code, where its ranks cannot see it."""
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    dist.init_process_group(backend, rank=rank, world_size=2)
    return {"rank": rank, "local_rank": local_rank, "world_size": 2}


NPROCS = 2   # as the lesson's notebook names its rank count
world_size = 2   # a global of the same name as a right answer's local (a notebook may hold one)


def setup_world_size_unpacked(backend):
    """Right: the world size unpacked from the environment into a local name the module also holds."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    return {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "world_size": world_size}


def test_a_local_world_size_is_not_the_modules(capsys):
    check_setup_from_env(setup_world_size_unpacked)
    assert capsys.readouterr().out.startswith("✓ setup_from_env")


def setup_world_size_from_the_notebooks_count(backend):
    """Wrong: the world size from the notebook's NPROCS, 2 for the check's ranks only."""
    dist.init_process_group(backend, rank=int(os.environ["RANK"]), world_size=NPROCS)
    return {"rank": int(os.environ["RANK"]), "local_rank": int(os.environ["LOCAL_RANK"]), "world_size": NPROCS}


def setup_sets_the_master(backend):
    """Wrong: writes MASTER_ADDR in the code (works on one machine, not on two)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    return setup_from_env(backend)


def setup_sets_the_port(backend):
    """Wrong: writes MASTER_PORT in the code (the next group, on one node, meets at the port the first one holds)."""
    os.environ["MASTER_PORT"] = "29500"
    return setup_from_env(backend)


def setup_world_of_the_node(backend):
    """Wrong: the world size of this node (1 process) for the world size of the job (2)."""
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["LOCAL_WORLD_SIZE"])
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    return {"rank": rank, "local_rank": local_rank, "world_size": world_size}


def setup_local_rank_from_the_gpu_count(backend):
    """Wrong: RANK modulo the GPUs this machine has (none visible where the check's ranks run)."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    return {"rank": rank, "local_rank": rank % torch.cuda.device_count(), "world_size": world_size}


def setup_local_rank_zero(backend):
    """Wrong: local rank written as 0 (right on nodes of one process, as the check's first run; wrong on one node)."""
    dist.init_process_group(backend)
    return {"rank": int(os.environ["RANK"]), "local_rank": 0, "world_size": int(os.environ["WORLD_SIZE"])}


def setup_not_written(backend):
    raise NotImplementedError("int(os.environ[...])")


@pytest.mark.parametrize("wrong, feedback", [
    (setup_reads_only, r"rank 0: after setup_from_env\('gloo'\) there is no process group.*init_process_group"),
    (setup_local_from_rank, r"rank 1: local_rank = 1, expected 0.*LOCAL_RANK is the rank on this node"),
    # the hint names both variables that hold 1 there, not RANK alone (the answer read GROUP_RANK)
    (setup_local_from_the_node, r"^rank 1: local_rank = 1, expected 0 \(two nodes, one process each\)\.\nHint: "
                                r"LOCAL_RANK is the rank on this node \(0 on both nodes here\); on rank 1 the global "
                                r"rank \(RANK\) and the node's index \(GROUP_RANK\) are 1"),
    (setup_local_rank_zero, r"^rank 1: local_rank = 0, expected 1 \(one node of two processes\)\.\nHint: LOCAL_RANK "
                            r"is the rank on this node \(here 0 and 1, on the one node\)"),
    (setup_strings, r"rank 0: rank is '0', a string.*int\(os.environ\['RANK'\]\)"),
    (setup_not_written, r"setup_from_env is not written yet"),
    (setup_gloo_hard_coded, r"^setup_from_env passes 'gloo' to init_process_group instead of its backend argument\.\n"
                            r"Hint: the caller chooses the backend.*init_process_group\(backend, \.\.\.\)"),
    (setup_nccl_as_keyword, r"^setup_from_env passes 'nccl' to init_process_group instead of its backend argument"),
    (setup_backend_from_cuda, r"^setup_from_env passes 'nccl' if torch\.cuda\.is_available\(\) else "
                              r"dist\.Backend\.GLOO to init_process_group instead of its backend argument"),
    (setup_backend_from_the_environment, r"^setup_from_env passes os\.environ\.get\('BACKEND', 'gloo'\) to "
                                         r"init_process_group instead of its backend argument"),
    (setup_sets_the_master, r"rank 0: setup_from_env set \{'MASTER_ADDR': '127.0.0.1'\}; torchrun sets MASTER_ADDR"),
    # named, not the store error a second group on the written port meets (a traceback through the check)
    (setup_sets_the_port, r"^rank 0: setup_from_env set \{'MASTER_PORT': '29500'\}; torchrun sets MASTER_ADDR and "
                          r"MASTER_PORT for the whole job\.\nHint: leave them as torchrun set them"),
    (setup_world_of_the_node, r"^rank \d: in setup_from_env, init_process_group got world_size=1, but WORLD_SIZE is 2\."
                              r"\nHint: 1 is this node's process count \(LOCAL_WORLD_SIZE\); "
                              r"world_size counts the processes of ALL nodes"),
    (setup_passes_strings, r"^rank \d: in setup_from_env, init_process_group got world_size='2', a string\.\nHint: "
                           r"the environment holds strings: pass int\(os.environ\['WORLD_SIZE'\]\)"),
    (setup_world_size_written, r"^rank \d: in setup_from_env, init_process_group got world_size=4, but WORLD_SIZE is "
                               r"2\.\nHint: world_size counts the processes of ALL nodes"),
    (setup_world_size_written_as_2, r"^setup_from_env writes the world size as 2 \(world_size=2\): this check's 2 "
                                    r"ranks cannot tell it from WORLD_SIZE.*Hint: .*int\(os.environ\['WORLD_SIZE'\]\)"),
    (setup_world_size_from_the_notebooks_count, r"^setup_from_env writes the world size as 2 \(world_size=NPROCS\)"),
    (setup_rank_from_local_rank, r"^rank 1: in setup_from_env, init_process_group got rank=0, but RANK is 1\.\nHint: "
                                 r"0 is this process's index on its node \(LOCAL_RANK"),
])
def test_setup_from_env_rejects(wrong, feedback):
    with pytest.raises(CheckFailed, match=f"(?s){feedback}"):
        check_setup_from_env(wrong)


def test_setup_from_env_rejects_a_hard_coded_nccl_where_no_gpu_is_visible(monkeypatch):
    """The ranks inherit CUDA_VISIBLE_DEVICES="", so on any machine init_process_group("nccl") raises.

    A CPU-only torch has no NCCL; a CUDA torch finds no GPU. (Where GPUs are visible, the
    check's message is tested by tests/gpu.) The variable reaches each rank before CUDA
    starts there, and the launcher itself never asks about GPUs with init_process_group=False.
    """
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(CheckFailed, match=r"(?s)rank \d failed while running setup_from_env.*(?i:nccl)"):
        check_setup_from_env(setup_nccl)


def test_setup_from_env_names_a_modulo_by_the_gpu_count(monkeypatch):
    """RANK % 4 or % 2 gives rank 1 local rank 1 on the check's second node, and fails as setup_local_from_rank does;
    RANK % torch.cuda.device_count() divides by 0 where no GPU is visible."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(CheckFailed, match=r"(?s)rank \d failed while running setup_from_env: raised ZeroDivisionError.*"
                                          r"\nHint: the line that raised divides by torch.cuda.device_count\(\).*"
                                          r"LOCAL_RANK: read it from the environment\.$"):
        check_setup_from_env(setup_local_rank_from_the_gpu_count)


def test_setup_from_env_ends_a_deadlock_with_a_message():
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s.*Every rank must call init_process_group"):
        check_setup_from_env(setup_only_on_rank_0, timeout=DEADLOCK_TIMEOUT)


# --- the generated exercise notebook fails every check ------------------------------------

def test_exercise_notebook_stubs_fail_their_checks():
    from pathlib import Path

    import nbformat

    path = Path(__file__).resolve().parent.parent / "exercises" / "06-backends-and-torchrun.ipynb"
    cells = nbformat.read(path, as_version=4).cells
    namespace: dict = {}
    for cell in cells:  # the setup cell and the three answer cells, as a learner would run them
        if cell.cell_type == "code" and cell.source.startswith(("import", "def pick_", "def device_", "def setup_")):
            exec(compile(cell.source, f"{path.name}", "exec"), namespace)
    checks = [(check_pick_backend, "pick_backend"), (check_device_and_ddp_kwargs, "device_and_ddp_kwargs"),
              (check_setup_from_env, "setup_from_env")]
    for check, name in checks:
        with pytest.raises(CheckFailed, match=f"{name} is not written yet"):
            check(namespace[name])


def setup_branches_on_the_backend(backend):
    """Right: reads its backend, then writes each branch's name out."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if backend == "nccl":
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "world_size": world_size}


def setup_through_a_helper(backend):
    """Right: passes its backend to a helper of its own."""
    def join(name):
        dist.init_process_group(name, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    join(backend)
    return {"rank": int(os.environ["RANK"]), "local_rank": int(os.environ["LOCAL_RANK"]),
            "world_size": int(os.environ["WORLD_SIZE"])}


@pytest.mark.parametrize("answer", [setup_branches_on_the_backend, setup_through_a_helper])
def test_a_backend_the_answer_reads_is_not_called_written_in(answer):
    """The source reader refuses only a function that never reads its backend (no launch needed to see it)."""
    from ddp_lab.checks.lesson06 import _hard_coded_backend

    assert _hard_coded_backend(answer) is None
    assert _hard_coded_backend(setup_gloo_hard_coded) == "'gloo'"


def setup_imports_the_function(backend):
    """Wrong, and out of the rank's check's sight (`init_process_group` imported by name at the top of the file, as a
    notebook's first cell may: bound before the check replaces dist's): this node's world size."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    init_process_group(backend, rank=rank, world_size=world_size)
    return {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "world_size": world_size}


def test_gloos_refusal_still_gets_the_world_size_hint():
    with pytest.raises(CheckFailed, match=r"(?s)rank 1 failed while running setup_from_env.*Hint: gloo refused a rank "
                                          r"that is not below the world size.*LOCAL_WORLD_SIZE counts only this node's"):
        check_setup_from_env(setup_imports_the_function)


def setup_destroys_its_group(backend):
    """Wrong: cleans up before returning, so the caller has no group to train in."""
    dist.init_process_group(backend)
    try:
        return torchruns_numbers()
    finally:
        dist.destroy_process_group()


def setup_without_a_backend(backend):
    """Wrong: leaves the backend to torch."""
    dist.init_process_group()
    return torchruns_numbers()


def setup_tcp_written(backend):
    """Wrong: an init_method address written in the code (seen in the source: refused before any rank starts)."""
    me = torchruns_numbers()
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:29517", rank=me["rank"], world_size=me["world_size"])
    return me


def setup_tcp_port_written(backend):
    """Wrong: MASTER_ADDR read, but a port written in the code (seen when init_process_group is called)."""
    me, port = torchruns_numbers(), 29517
    dist.init_process_group(backend, init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}", rank=me["rank"],
                            world_size=me["world_size"])
    return me


def setup_file_init_method(backend):
    """Wrong: a file:// init_method, which ignores the address torchrun set (and a reused file keeps the ranks
    waiting): refused when init_process_group is called, not left to hang."""
    me = torchruns_numbers()
    dist.init_process_group(backend, init_method="file:///tmp/ddp_lab_sharedfile", rank=me["rank"],
                            world_size=me["world_size"])
    return me


def setup_rank_as_a_float(backend):
    """Wrong: the rank read as a float, which compares equal to the int (0.0 == 0)."""
    dist.init_process_group(backend)
    return {**torchruns_numbers(), "rank": float(os.environ["RANK"])}


def setup_rank_as_a_tensor(backend):
    """Wrong: the rank as a tensor, whose comparison with the int is a tensor (never raised as a mismatch)."""
    dist.init_process_group(backend)
    return {**torchruns_numbers(), "rank": torch.tensor(dist.get_rank())}


def setup_timeout_in_seconds(backend):
    """Wrong: init_process_group's timeout as a number of seconds (it takes a datetime.timedelta)."""
    dist.init_process_group(backend, timeout=30)
    return torchruns_numbers()


@pytest.mark.parametrize("wrong, feedback", [
    (setup_rank_as_a_float, r"^rank 0: rank is 0\.0, a float; expected the int 0\.\nHint: the caller uses it as a "
                            r"list index.*int\(os.environ\['RANK'\]\)"),
    (setup_rank_as_a_tensor, r"^rank 0: rank is a tensor of shape \(\) and dtype torch.int64; expected the int 0\."),
    # not the launcher's store, which the timeout reaches first, with its frames
    (setup_timeout_in_seconds, r"^rank \d: in setup_from_env, init_process_group\(timeout=30\): the timeout is a "
                               r"datetime.timedelta, not int, e.g. timeout=datetime.timedelta\(seconds=30\)\.\nHint: "
                               r"pass a datetime.timedelta, or leave the timeout out for torch's default\.$"),
    (setup_destroys_its_group, r"^rank 0: setup_from_env\('gloo'\) created the process group, then destroyed it "
                               r"\(dist.destroy_process_group\(\)\) before returning"),
    (setup_without_a_backend, r"^rank 0: setup_from_env called init_process_group with no backend .*expected 'gloo'"),
    (setup_tcp_written, r"^rank \d: in setup_from_env, init_process_group got init_method='tcp://127.0.0.1:29517', "
                        r"but torchrun set MASTER_ADDR=127.0.0.1 and MASTER_PORT=\d+\.\nHint: torchrun chooses"),
    (setup_tcp_port_written, r"^rank \d: in setup_from_env, init_process_group got "
                             r"init_method='tcp://127.0.0.1:29517', but torchrun set MASTER_ADDR=127.0.0.1 and "
                             r"MASTER_PORT=\d+\.\nHint: torchrun chooses"),
    (setup_file_init_method, r"^rank \d: in setup_from_env, init_process_group got "
                             r"init_method='file:///tmp/ddp_lab_sharedfile', a file .* MASTER_ADDR and MASTER_PORT .*"
                             r"\nHint: torchrun chooses where the job's processes meet"),
])
def test_setup_from_env_names_the_mistake(wrong, feedback):
    with pytest.raises(CheckFailed, match=f"(?s){feedback}"):
        check_setup_from_env(wrong)


def test_a_written_port_is_named_where_something_else_holds_it():
    """The answer writes MASTER_PORT=29500: its init_process_group is refused before torch runs, so nothing binds
    29500, and the write is named whether or not the port is free on this machine (held here, by this test or by
    whatever already holds it; bound, gloo's store failed with EADDRINUSE instead)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        try:
            held.bind(("127.0.0.1", 29500))
            held.listen()
        except OSError:
            pass   # already held by another process: the case this test is about
        with pytest.raises(CheckFailed, match=r"^rank 0: setup_from_env set \{'MASTER_PORT': '29500'\}; torchrun sets "
                                              r"MASTER_ADDR and MASTER_PORT for the whole job\.\nHint: leave them"):
            check_setup_from_env(setup_sets_the_port)


def test_init_process_group_is_refused_before_torch_runs_once_the_address_is_written(monkeypatch):
    """The checked init_process_group raises AddressOverwritten, without calling torch's, once the answer has written
    MASTER_ADDR or MASTER_PORT over torchrun's value; with neither written it calls torch's."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29511")
    calls = []
    changed: set = set()
    checked = lesson06._checked_arguments(lambda backend, **kwargs: calls.append(backend), {}, changed)
    changed.add("MASTER_PORT")
    with pytest.raises(lesson06.AddressOverwritten):
        checked("gloo")
    assert calls == []
    changed.clear()
    checked("gloo")
    assert calls == ["gloo"]


def setup_master_fallback(backend):
    """Right: a fallback for running without torchrun, which leaves torchrun's MASTER_ADDR/MASTER_PORT as they are."""
    os.environ["MASTER_ADDR"] = os.environ.get("MASTER_ADDR", "localhost")
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "29500")
    return setup_from_env(backend)


def setup_tcp_from_the_environment(backend):
    """Right: a setdefault fallback (no write under torchrun), and a tcp:// address built from torchrun's variables."""
    os.environ.setdefault("MASTER_ADDR", "localhost")
    me = torchruns_numbers()
    dist.init_process_group(backend, init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=me["rank"], world_size=me["world_size"])
    return me


def setup_local_rank_from_the_group_rank(backend):
    """Right: the local rank from torchrun's GROUP_RANK (the node's index) and LOCAL_WORLD_SIZE."""
    me = torchruns_numbers()
    local_rank = me["rank"] - int(os.environ["GROUP_RANK"]) * int(os.environ["LOCAL_WORLD_SIZE"])
    dist.init_process_group(backend, rank=me["rank"], world_size=me["world_size"])
    return {**me, "local_rank": local_rank}


def setup_by_hand_when_not_under_torchrun(backend):
    """Right: an address written in the code, in a branch for runs without torchrun, which the check never takes."""
    if "MASTER_ADDR" not in os.environ:
        dist.init_process_group(backend, init_method="tcp://127.0.0.1:29500", rank=0, world_size=1)
    else:
        dist.init_process_group(backend)
    return {"rank": dist.get_rank(), "local_rank": int(os.environ["LOCAL_RANK"]), "world_size": dist.get_world_size()}


@pytest.mark.parametrize("answer", [setup_master_fallback, setup_tcp_from_the_environment,
                                    setup_local_rank_from_the_group_rank, setup_by_hand_when_not_under_torchrun])
def test_setup_from_env_accepts(answer, capsys):
    check_setup_from_env(answer)
    assert capsys.readouterr().out.startswith("✓ setup_from_env")
