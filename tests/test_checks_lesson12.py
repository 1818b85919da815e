"""The lesson 12 check accepts a restartable training function and names what a wrong one lost.

Each wrong answer below is a checkpoint a learner is likely to write; the test pins the part
of the feedback that names the missing piece. Every check run launches 2 gloo ranks three
times (uninterrupted, killed at step 11, resumed, the resumed run stopped once more at step 13
and its train called again): a few seconds each.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import tempfile
import threading
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson12
from ddp_lab.checks.common import computed_divisor, numeric_divisor
from ddp_lab.checks.lesson12 import check_restartable
from ddp_lab.course.fault_tolerance.checkpoint import atomic_save, capture_rng, restore_rng
from ddp_lab.launcher.launch import launch

# The right answers are proven once, by nbval of solutions/12-*.ipynb (its check cells store ✓):
# this file tries the wrong ones and the cases the solution does not cover.

SEED, BATCH = 0, 4
_data = torch.Generator().manual_seed(SEED)
X = torch.randn(24, 4, generator=_data)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(24, 1, generator=_data)


def make_model():
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.25), nn.Linear(8, 1))


def _setup(rank, same_seed=False):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = DistributedSampler(range(len(X)), num_replicas=dist.get_world_size(), rank=rank, seed=SEED)
    torch.manual_seed(SEED if same_seed else SEED + rank)
    return model, optimizer, sampler


def _save(path, model, optimizer, step, keep=("model", "optimizer", "rng"), write=atomic_save):
    state = {"step": step}
    if "model" in keep:
        state["model"] = model.state_dict()
    if "optimizer" in keep:
        state["optimizer"] = optimizer.state_dict()
    if "rng" in keep:
        state["rng"] = capture_rng()
    write(state, path)


def _load(path, model, optimizer) -> int:
    state = torch.load(path, weights_only=False)
    if "model" in state:
        model.load_state_dict(state["model"])
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if "rng" in state:
        restore_rng(state["rng"])
    return state["step"]


def _restartable(rank, directory, total_steps, step_fn, keep=("model", "optimizer", "rng"), resume=True,
                 restore_epoch=True, shared=False, set_epoch=True, once_per_epoch=False, elsewhere=None,
                 write=atomic_save, numbered=False, reset_position=True, later_epoch_offset=0, every=1,
                 oldest=False, resume_at=None, rank_0_only=(), same_seed=False, barrier="after", log=None):
    model, optimizer, sampler = _setup(rank, same_seed)
    path = os.path.join(elsewhere or directory, "checkpoint.pt" if shared else f"rank-{rank}.pt")
    number = "{:06d}" if oldest else "{}"   # zero-padded where the first name in sorted order is taken
    if numbered:   # a file per step, named by the steps done; the latest taken as the last name in sorted order
        names = sorted(name for name in os.listdir(directory) if name.startswith(f"rank-{rank}-step-"))
        path = os.path.join(directory, (names[0] if oldest else names[-1]) if names else "none")
    loads = resume and (rank == 0 or "load" not in rank_0_only)
    step = _load(path, model, optimizer) if loads and os.path.exists(path) else 0
    if resume_at is not None and step:
        step = resume_at
    per_epoch = math.ceil(len(sampler) / BATCH)
    epoch, position = divmod(step, per_epoch)
    resumed, offset = step > 0, 0   # offset: added to the epochs after the one a resumed run starts in
    while step < total_steps:
        if reset_position:
            epoch, position = divmod(step, per_epoch)
        if set_epoch:
            sampler.set_epoch((epoch if restore_epoch else 0) + offset)
        for batch in torch.tensor(list(sampler)).split(BATCH)[position:]:
            if step == total_steps:
                break
            step_fn(step, model, optimizer, X[batch], Y[batch])
            step += 1
            if numbered:
                path = os.path.join(directory, f"rank-{rank}-step-{number.format(step)}.pt")
            saves = not (shared or "save" in rank_0_only) or rank == 0
            if barrier == "before" or (barrier == "rank 0 before" and rank == 0):
                dist.barrier()
            if saves and (not once_per_epoch or step % per_epoch == 0) and step % every == 0:
                _save(path, model, optimizer, step, keep, write)
            if barrier == "after" or (barrier == "rank 0 before" and rank != 0):
                dist.barrier()
            if log is not None and rank == 0:   # a line of progress, written after every rank's checkpoint
                with open(os.path.join(directory, log), "a") as progress:
                    progress.write(f"step {step} saved\n")
        restore_epoch = True  # the mistake below only concerns the epoch the run resumes in
        offset = later_epoch_offset if resumed else 0
        epoch += 1


def train(rank, directory, total_steps, step_fn):
    _restartable(rank, directory, total_steps, step_fn)


def train_stub(rank, directory, total_steps, step_fn):
    raise NotImplementedError("one file per rank ...")


def forgets_the_optimizer(rank, directory, total_steps, step_fn):
    _restartable(rank, directory, total_steps, step_fn, keep=("model", "rng"))


def forgets_the_rng(rank, directory, total_steps, step_fn):
    _restartable(rank, directory, total_steps, step_fn, keep=("model", "optimizer"))


def forgets_the_model(rank, directory, total_steps, step_fn):
    _restartable(rank, directory, total_steps, step_fn, keep=("optimizer", "rng"))


def never_loads(rank, directory, total_steps, step_fn):
    _restartable(rank, directory, total_steps, step_fn, resume=False)


def restarts_the_epoch_from_zero(rank, directory, total_steps, step_fn):
    _restartable(rank, directory, total_steps, step_fn, restore_epoch=False)


def rank_zero_saves_for_everyone(rank, directory, total_steps, step_fn):
    """Lesson 05's pattern, one file written by rank 0: but the RNG state in it is rank 0's."""
    _restartable(rank, directory, total_steps, step_fn, shared=True)


def seeds_every_rank_alike(rank, directory, total_steps, step_fn):
    """torch.manual_seed(SEED) on every rank: resumes right, but every rank draws the same dropout masks."""
    _restartable(rank, directory, total_steps, step_fn, same_seed=True)


def rank_zero_saves_with_one_seed(rank, directory, total_steps, step_fn):
    """Rank 0's one file for everyone, made to fit by seeding every rank alike: resumes right, one dropout stream."""
    _restartable(rank, directory, total_steps, step_fn, shared=True, same_seed=True)


def saves_in_place(rank, directory, total_steps, step_fn):
    """torch.save straight to the checkpoint's name: resumes right here (the kill never lands mid-write)."""
    _restartable(rank, directory, total_steps, step_fn, write=torch.save)


def _through_an_open_file(state, path):
    with open(path, "wb") as file:
        torch.save(state, file)


def saves_through_an_open_file(rank, directory, total_steps, step_fn):
    """torch.save into a file opened on the checkpoint's name: as torn by a kill as a save to the name."""
    _restartable(rank, directory, total_steps, step_fn, write=_through_an_open_file)


def _backup_then_save(state, path):
    if os.path.exists(path):
        os.replace(path, path + ".bak")
    torch.save(state, path)


def backs_up_then_saves_in_place(rank, directory, total_steps, step_fn):
    """The previous checkpoint renamed away to .bak, then torch.save straight to the name that is loaded."""
    _restartable(rank, directory, total_steps, step_fn, write=_backup_then_save)


def _copy_of_a_temporary(state, path):
    torch.save(state, path + ".tmp")
    shutil.copyfile(path + ".tmp", path)


def copies_a_temporary_file(rank, directory, total_steps, step_fn):
    """A temporary file, complete, then copied onto the name: the copy writes the loaded file piece by piece."""
    _restartable(rank, directory, total_steps, step_fn, write=_copy_of_a_temporary)


def saves_once_per_epoch(rank, directory, total_steps, step_fn):
    """As lesson 12's loop did: a crash within an epoch loses the steps done since its start."""
    _restartable(rank, directory, total_steps, step_fn, once_per_epoch=True)


def latest_by_name(rank, directory, total_steps, step_fn):
    """A checkpoint per step, 'rank-0-step-9.pt', and the last name in sorted order taken as the latest: past 10
    checkpoints 'rank-0-step-11.pt' sorts before 'rank-0-step-9.pt'."""
    _restartable(rank, directory, total_steps, step_fn, numbered=True)


def resumes_from_the_oldest(rank, directory, total_steps, step_fn):
    """A checkpoint per step, 'rank-0-step-000009.pt', and the first name in sorted order taken: the oldest."""
    _restartable(rank, directory, total_steps, step_fn, numbered=True, oldest=True)


def saves_every_5_steps(rank, directory, total_steps, step_fn):
    """Killed at the start of step 11, the last checkpoint holds 10 steps done: step 10 runs twice."""
    _restartable(rank, directory, total_steps, step_fn, every=5)


def resumes_at_a_step_written_in(rank, directory, total_steps, step_fn):
    """Loads the checkpoint but resumes at step 11, the step of the check's kill, written in the code."""
    _restartable(rank, directory, total_steps, step_fn, resume_at=11)


def numbers_later_epochs_one_too_high(rank, directory, total_steps, step_fn):
    """Resets the position, but every epoch after the resumed one is set one too high (epoch + 1)."""
    _restartable(rank, directory, total_steps, step_fn, later_epoch_offset=1)


def skips_in_every_later_epoch(rank, directory, total_steps, step_fn):
    """The epoch and position computed once, on resume: every later epoch skips that many batches too."""
    _restartable(rank, directory, total_steps, step_fn, reset_position=False)


def islices_a_data_loader(rank, directory, total_steps, step_fn):
    """A DataLoader over the sampler, the done batches skipped with islice: creating its iterator after the restore
    draws a seed from the global RNG."""
    model, optimizer, sampler = _setup(rank)
    path = os.path.join(directory, f"rank-{rank}.pt")
    step = _load(path, model, optimizer) if os.path.exists(path) else 0
    loader = DataLoader(TensorDataset(X, Y), batch_size=BATCH, sampler=sampler)
    while step < total_steps:
        epoch, position = divmod(step, len(loader))
        sampler.set_epoch(epoch)
        for x, y in itertools.islice(loader, position, None):
            if step == total_steps:
                break
            step_fn(step, model, optimizer, x, y)
            step += 1
            _save(path, model, optimizer, step)
            dist.barrier()


def picks_the_step_by_its_number(rank, directory, total_steps, step_fn):
    """Right: a checkpoint per step, 'rank-0-9.pt' (not zero-padded), the newest found by int(), each written to a
    temporary name and renamed with os.rename; two kept."""
    model, optimizer, sampler = _setup(rank)
    found = [(int(name[len(f"rank-{rank}-"):-3]), name) for name in os.listdir(directory)
             if name.startswith(f"rank-{rank}-") and name.endswith(".pt")]
    step = _load(os.path.join(directory, max(found)[1]), model, optimizer) if found else 0
    per_epoch = math.ceil(len(sampler) / BATCH)
    while step < total_steps:
        epoch, position = divmod(step, per_epoch)
        sampler.set_epoch(epoch)
        for batch in torch.tensor(list(sampler)).split(BATCH)[position:]:
            if step == total_steps:
                break
            step_fn(step, model, optimizer, X[batch], Y[batch])
            step += 1
            path = os.path.join(directory, f"rank-{rank}-{step}.pt")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": capture_rng(),
                        "step": step}, path + ".tmp")
            os.rename(path + ".tmp", path)
            if os.path.exists(os.path.join(directory, f"rank-{rank}-{step - 2}.pt")):
                os.remove(os.path.join(directory, f"rank-{rank}-{step - 2}.pt"))
            dist.barrier()


def test_accepts_a_checkpoint_per_step_renamed_into_place():
    check_restartable(picks_the_step_by_its_number)   # raises CheckFailed where it would refuse it


def _new_file_per_step(rank, directory, total_steps, step_fn, publish, find):
    """A new checkpoint file per step, 'rank0-ckpt-11.pt', written once with torch.save straight to its name; then
    `publish(rank, directory, name, step)`. The restart resumes from `find(rank, directory)` (None: from step 0)."""
    model, optimizer, sampler = _setup(rank)
    found = find(rank, directory)
    step = _load(found, model, optimizer) if found else 0
    per_epoch = math.ceil(len(sampler) / BATCH)
    while step < total_steps:
        epoch, position = divmod(step, per_epoch)
        sampler.set_epoch(epoch)
        for batch in torch.tensor(list(sampler)).split(BATCH)[position:]:
            if step == total_steps:
                break
            step_fn(step, model, optimizer, X[batch], Y[batch])
            step += 1
            name = f"rank{rank}-ckpt-{step}.pt"
            _save(os.path.join(directory, name), model, optimizer, step, write=torch.save)
            publish(rank, directory, name, step)
            dist.barrier()


def _pointer(rank, directory, text=None):
    """With `text`: writes it to a temporary file and renames that onto the pointer 'rank0-latest'. Without: what
    the pointer holds (None: no pointer yet)."""
    pointer = os.path.join(directory, f"rank{rank}-latest")
    if text is not None:
        with open(pointer + ".tmp", "w") as file:
            file.write(text)
        os.replace(pointer + ".tmp", pointer)
    elif os.path.exists(pointer):
        with open(pointer) as file:
            return file.read()
    return None


def points_to_each_new_file(rank, directory, total_steps, step_fn):
    """Right: the new file's name, written to a pointer file replaced with os.replace; the restart reads it."""
    def publish(rank, directory, name, step):
        _pointer(rank, directory, name)

    def find(rank, directory):
        name = _pointer(rank, directory)
        return name and os.path.join(directory, name)
    _new_file_per_step(rank, directory, total_steps, step_fn, publish, find)


def points_to_each_new_step(rank, directory, total_steps, step_fn):
    """Right: the same, the pointer holding the step only ('11'), from which the restart names the file."""
    def publish(rank, directory, name, step):
        _pointer(rank, directory, f"{step}\n")

    def find(rank, directory):
        step = _pointer(rank, directory)
        return step and os.path.join(directory, f"rank{rank}-ckpt-{int(step)}.pt")
    _new_file_per_step(rank, directory, total_steps, step_fn, publish, find)


def links_each_new_file(rank, directory, total_steps, step_fn):
    """Right: a symlink to the new file, made under a temporary name and replaced onto 'rank0-latest' with os.replace;
    the restart resolves it with os.readlink and loads the file it names."""
    def publish(rank, directory, name, step):
        link = os.path.join(directory, f"rank{rank}-latest")
        if os.path.lexists(link + ".tmp"):
            os.remove(link + ".tmp")
        os.symlink(name, link + ".tmp")
        os.replace(link + ".tmp", link)

    def find(rank, directory):
        link = os.path.join(directory, f"rank{rank}-latest")
        return os.path.join(directory, os.readlink(link)) if os.path.lexists(link) else None
    _new_file_per_step(rank, directory, total_steps, step_fn, publish, find)


def _newest_that_loads(rank, directory):
    steps = sorted((int(name[len(f"rank{rank}-ckpt-"):-3]) for name in os.listdir(directory)
                    if name.startswith(f"rank{rank}-ckpt-") and name.endswith(".pt")), reverse=True)
    for step in steps:
        path = os.path.join(directory, f"rank{rank}-ckpt-{step}.pt")
        try:
            torch.load(path, weights_only=False)
        except Exception:
            continue
        return path
    return None


def falls_back_from_the_newest_file(rank, directory, total_steps, step_fn):
    """A new file per step, nothing published: the restart lists the folder and takes the newest file that loads."""
    _new_file_per_step(rank, directory, total_steps, step_fn, lambda *published: None, _newest_that_loads)


@pytest.mark.parametrize("answer", [points_to_each_new_file, points_to_each_new_step, links_each_new_file])
def test_accepts_a_new_file_per_step_published_atomically(answer):
    check_restartable(answer)   # raises CheckFailed where it would refuse it


def _published_per_step(rank, directory, total_steps, step_fn, name, text, find, publish_first=False):
    """A new checkpoint file per step, `name(rank, step)` (below `directory`), written with torch.save straight to its
    name; the pointer 'rank0-latest' replaced with `text(name, step)` after the write (before it: `publish_first`).
    The restart loads the file `find(rank, text)` names."""
    model, optimizer, sampler = _setup(rank)
    held = _pointer(rank, directory)
    step = _load(os.path.join(directory, find(rank, held)), model, optimizer) if held is not None else 0
    per_epoch = math.ceil(len(sampler) / BATCH)
    while step < total_steps:
        epoch, position = divmod(step, per_epoch)
        sampler.set_epoch(epoch)
        for batch in torch.tensor(list(sampler)).split(BATCH)[position:]:
            if step == total_steps:
                break
            step_fn(step, model, optimizer, X[batch], Y[batch])
            step += 1
            path = os.path.join(directory, name(rank, step))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if publish_first:
                _pointer(rank, directory, text(name(rank, step), step))
            _save(path, model, optimizer, step, write=torch.save)
            if not publish_first:
                _pointer(rank, directory, text(name(rank, step), step))
            dist.barrier()


def points_with_json_to_each_step(rank, directory, total_steps, step_fn):
    """Right: the pointer holds {"step": 11}; the restart builds 'ckpt-r0-11.pt' from it."""
    _published_per_step(rank, directory, total_steps, step_fn, lambda rank, step: f"ckpt-r{rank}-{step}.pt",
                        lambda name, step: json.dumps({"step": step}),
                        lambda rank, text: f"ckpt-r{rank}-{json.loads(text)['step']}.pt")


def points_to_each_stem(rank, directory, total_steps, step_fn):
    """Right: the pointer holds the file's name without '.pt'."""
    _published_per_step(rank, directory, total_steps, step_fn, lambda rank, step: f"ckpt-r{rank}-{step}.pt",
                        lambda name, step: name[:-len(".pt")], lambda rank, text: f"{text}.pt")


def points_to_each_step_folder(rank, directory, total_steps, step_fn):
    """Right: DeepSpeed's layout, 'global_step11/rank-0.pt', the pointer holding 'global_step11'."""
    _published_per_step(rank, directory, total_steps, step_fn, lambda rank, step: f"global_step{step}/rank-{rank}.pt",
                        lambda name, step: f"global_step{step}", lambda rank, text: f"{text}/rank-{rank}.pt")


def alternates_two_slots_behind_a_pointer(rank, directory, total_steps, step_fn):
    """Right: two slots, 'slot-0-a.pt' and 'slot-0-b.pt', written in turn with torch.save straight to the name; then
    the pointer, replaced with os.replace, names the slot just written. The slot being written is never the one the
    pointer names."""
    _published_per_step(rank, directory, total_steps, step_fn, lambda rank, step: f"slot-{rank}-{'ab'[step % 2]}.pt",
                        lambda name, step: name, lambda rank, text: text)


def publishes_before_writing(rank, directory, total_steps, step_fn):
    """The pointer replaced with the new file's name before torch.save writes that file."""
    _published_per_step(rank, directory, total_steps, step_fn, lambda rank, step: f"ckpt-r{rank}-{step}.pt",
                        lambda name, step: name, lambda rank, text: text, publish_first=True)


def saves_in_place_behind_a_symlink(rank, directory, total_steps, step_fn):
    """torch.save straight to 'rank-0.pt' every step, a symlink 'rank0-latest' to it made once (os.symlink, never
    replaced); the restart loads the link."""
    model, optimizer, sampler = _setup(rank)
    path, link = os.path.join(directory, f"rank-{rank}.pt"), os.path.join(directory, f"rank{rank}-latest")
    step = _load(link, model, optimizer) if os.path.lexists(link) else 0
    per_epoch = math.ceil(len(sampler) / BATCH)
    while step < total_steps:
        epoch, position = divmod(step, per_epoch)
        sampler.set_epoch(epoch)
        for batch in torch.tensor(list(sampler)).split(BATCH)[position:]:
            if step == total_steps:
                break
            step_fn(step, model, optimizer, X[batch], Y[batch])
            step += 1
            _save(path, model, optimizer, step, write=torch.save)
            if not os.path.lexists(link):
                os.symlink(os.path.basename(path), link)
            dist.barrier()


@pytest.mark.parametrize("answer", [points_with_json_to_each_step, points_to_each_stem, points_to_each_step_folder,
                                    alternates_two_slots_behind_a_pointer])
def test_accepts_a_pointer_that_names_the_file_another_way_or_a_slot_not_being_written(answer):
    check_restartable(answer)   # raises CheckFailed where it would refuse it


def test_names_a_pointer_published_before_the_file_it_names_was_complete():
    with pytest.raises(CheckFailed, match=r"^rank 0: publishes_before_writing wrote 'ckpt-r0-11\.pt' with torch\.save "
                                          r"straight to the name it is loaded from after it renamed the pointer file "
                                          r"'rank0-latest' into place naming it: the pointer was published before the "
                                          r"file it names was complete\. A kill during the write leaves the pointer "
                                          r"naming a torn file, and the restart loads it\.\nHint: write the "
                                          r"checkpoint completely first, then publish its name"):
        check_restartable(publishes_before_writing)


def test_judges_the_file_a_symlink_loaded_resolves_to():
    with pytest.raises(CheckFailed, match=r"^rank 0: saves_in_place_behind_a_symlink wrote 'rank-0\.pt' with "
                                          r"torch\.save straight to the name it is loaded from: a kill during the "
                                          r"write leaves a torn file there, and the restart cannot load it \(nor the "
                                          r"checkpoint before it, which that name held\)\."):
        check_restartable(saves_in_place_behind_a_symlink)


def test_names_a_new_file_per_step_found_without_a_published_name():
    with pytest.raises(CheckFailed, match=r"(?s)^rank 0: falls_back_from_the_newest_file wrote 'rank0-ckpt-11\.pt' "
                                          r"with torch\.save straight to the name it is loaded from, a name it wrote "
                                          r"once, but the restart chose that file with no atomically published name "
                                          r"for it: .*A kill during that write leaves a torn file, the newest, for the "
                                          r"restart to pick\.\nHint: .*os\.replace it into place.*publish each new "
                                          r"file's name atomically: a pointer file or a symlink"):
        check_restartable(falls_back_from_the_newest_file)


def test_names_the_checkpoint_a_name_saved_over_each_step_held():
    with pytest.raises(CheckFailed, match=r"^rank 0: saves_in_place wrote 'rank-0\.pt' with torch\.save straight to "
                                          r"the name it is loaded from: a kill during the write leaves a torn file "
                                          r"there, and the restart cannot load it \(nor the checkpoint before it, "
                                          r"which that name held\)\."):
        check_restartable(saves_in_place)


ELSEWHERE = os.path.join(tempfile.gettempdir(), "ddp-lab-test-lesson12-elsewhere")


def saves_outside_the_directory(rank, directory, total_steps, step_fn):
    """A fixed folder (as a path relative to the working folder would be): every run finds the last one's files."""
    _restartable(rank, directory, total_steps, step_fn, elsewhere=ELSEWHERE)


def never_sets_the_epoch(rank, directory, total_steps, step_fn):
    """Resumes exactly, but every epoch of every run is epoch 0's order: not train_plain's run."""
    _restartable(rank, directory, total_steps, step_fn, set_epoch=False)


def rank_zero_loads_for_everyone(rank, directory, total_steps, step_fn):
    """Rank 0 writes one file and only rank 0 loads it: rank 1 resumes at step 0, rank 0 at step 11."""
    _restartable(rank, directory, total_steps, step_fn, shared=True, rank_0_only=("load",))


def rank_zero_saves_its_own_file_alone(rank, directory, total_steps, step_fn):
    """A file per rank, but saved under `if rank == 0:`: rank 1 finds none and resumes at step 0."""
    _restartable(rank, directory, total_steps, step_fn, rank_0_only=("save",))


@pytest.mark.parametrize("answer, read", [(rank_zero_loads_for_everyone, "checkpoint.pt"),
                                          (rank_zero_saves_its_own_file_alone, "rank-0.pt")])
def test_names_ranks_that_resume_at_different_steps(answer, read):
    # their all-reduces would pair step 11 with step 0 and hang until the timeout: the check says where each began
    with pytest.raises(CheckFailed, match=rf"(?s)^after the crash the ranks resumed at different steps: rank 0 at "
                                          rf"step 11, having read \['{read}'\]; rank 1 at step 0, having read no "
                                          r"file.*Hint: every rank must load a checkpoint at the start"):
        check_restartable(answer, timeout=20)


def saves_without_a_barrier(rank, directory, total_steps, step_fn):
    """A file per rank, atomically, but no rank waits for the others' saves: only step_fn's all-reduce pairs them."""
    _restartable(rank, directory, total_steps, step_fn, barrier=None)


def waits_before_saving(rank, directory, total_steps, step_fn):
    """The barrier before the save: every rank has finished the step, but none waits for the others' checkpoints."""
    _restartable(rank, directory, total_steps, step_fn, barrier="before")


def rank_zero_saves_for_everyone_without_a_barrier(rank, directory, total_steps, step_fn):
    """One file, written by rank 0 alone, and nobody waits for it."""
    _restartable(rank, directory, total_steps, step_fn, shared=True, barrier=None)


def _save_in_a_thread(state, path):
    """atomic_save started on a thread of its own and not waited for; on rank 0, after step 10, other work (a slow
    log line) follows, longer than STILL_WAITING: rank 1 waits that long in its barrier while rank 0's save runs."""
    threading.Thread(target=atomic_save, args=(state, path)).start()
    if dist.get_rank() == 0 and state["step"] == lesson12.CRASH_AT:
        time.sleep(3 * lesson12.STILL_WAITING)


def saves_in_a_thread_it_does_not_wait_for(rank, directory, total_steps, step_fn):
    """The barrier after the save, but the save runs on a thread nobody joins: the barrier waits for no checkpoint.
    Rank 0's main thread reaches its barrier while the save is still writing, so rank 1 goes on."""
    _restartable(rank, directory, total_steps, step_fn, write=_save_in_a_thread)


def rank_zero_waits_before_saving_rank_one_after(rank, directory, total_steps, step_fn):
    """One barrier a step on every rank, but rank 0's comes before its save: rank 1's barrier after its own save
    pairs with it, and rank 1 goes on while rank 0 saves. Rank 1 waits in a collective during rank 0's slow save,
    one that rank 0 had already entered, so the check's wait must not end there."""
    _restartable(rank, directory, total_steps, step_fn, barrier="rank 0 before")


@pytest.mark.parametrize("answer", [saves_without_a_barrier, waits_before_saving,
                                    rank_zero_saves_for_everyone_without_a_barrier,
                                    rank_zero_waits_before_saving_rank_one_after,
                                    saves_in_a_thread_it_does_not_wait_for])
def test_names_a_rank_that_goes_on_before_every_checkpoint_is_complete(answer):
    # rank 0's save after step 10 is slow; rank 1 starts step 11 meanwhile and is killed, so rank 0 dies mid-save
    with pytest.raises(CheckFailed, match=r"(?s)^rank 1 was killed at the start of step 11 while rank 0 was still "
                                          r"saving '[^']+' after step 10 .*Hint: after the save, dist.barrier\(\) "
                                          r"on every rank"):
        check_restartable(answer, timeout=20)


def _count_collectives(rank):
    """On each rank: the collective calls `_counting` numbers, with what it passes to on_entry and on_exit."""
    collectives, seen = {"entered": 0, "lock": threading.Lock(), "other group": False}, []
    barrier, all_gather_object = (lesson12._counting(getattr(dist, name), collectives,
                                                     lambda n, async_op: seen.append(("in", n, async_op)),
                                                     lambda n: seen.append(("out", n)))
                                  for name in ("barrier", "all_gather_object"))
    barrier()
    gathered = [None, None]
    all_gather_object(gathered, rank)   # its inner collectives are torch's own functions: one call here
    barrier(async_op=True).wait()
    default_group_only = not collectives["other group"]
    barrier(group=dist.new_group([0, 1]))
    return seen, default_group_only, collectives["other group"], gathered


def test_the_slow_disk_numbers_each_collective_call_and_notes_another_group():
    # the killed run's slow save ends early only where rank 1 waits in a collective rank 0 has not entered yet:
    # that needs both ranks' numbers to agree call for call (test_names_a_rank_that_goes_on_... checks the rule)
    for seen, default_group_only, other_group, gathered in launch(_count_collectives, nprocs=2, backend="gloo",
                                                                   timeout=30):
        assert seen == [("in", 1, False), ("out", 1), ("in", 2, False), ("out", 2), ("in", 3, True), ("out", 3),
                        ("in", 4, False), ("out", 4)]
        assert default_group_only and other_group and gathered == [0, 1]


def test_a_right_answers_slow_save_goes_on_once_rank_1_waits_in_its_barrier():
    # what makes a right answer's check quick: rank 0's save did not wait SLOW_SAVE s, because rank 1 waited in its
    # barrier after the save (its call number past rank 0's count, with no LEFT mark) for STILL_WAITING s
    with tempfile.TemporaryDirectory() as root:
        killed, marks = os.path.join(root, "killed"), os.path.join(root, "marks")
        os.makedirs(killed), os.makedirs(marks)
        lesson12._killed_run(train, killed, marks, 30, "train")
        with open(os.path.join(marks, lesson12.WENT_ON)) as went_on:
            number = went_on.read()
        names = os.listdir(marks)
        assert f"{lesson12.WAITS}{number}" in names and lesson12.KILLED in names
        assert lesson12.STOPPED_SAVING not in names


_SAVE_AS_IMPORTED = torch.save   # the function itself: a call through this name is not one the check sees


def _save_through_an_imported_name(state, path):
    """An atomic save whose torch.save the check does not see (`from torch import save` in a learner's code)."""
    _SAVE_AS_IMPORTED(state, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)


def logs_its_progress_after_the_barrier(rank, directory, total_steps, step_fn):
    """Right: a checkpoint per rank, saved atomically through an imported name, then the barrier; then rank 0
    appends a line to a log (a write after every rank's checkpoint is complete, not a checkpoint's)."""
    _restartable(rank, directory, total_steps, step_fn, write=_save_through_an_imported_name, log="progress.log")


def test_accepts_a_write_after_the_barrier_that_is_no_checkpoint():
    # the check slows rank 0's first torch.save into a file after step 10, not its next write of any kind: the log
    # line after the barrier is no save rank 1 should have waited for (it was taken for one, and refused)
    check_restartable(logs_its_progress_after_the_barrier)   # raises CheckFailed where it would refuse it


def test_the_blank_stub_is_named_without_starting_ranks():
    with pytest.raises(CheckFailed, match=r"train_stub is not written yet.*NotImplementedError\('one file per rank"):
        check_restartable(train_stub)


@pytest.mark.parametrize("answer, feedback", [
    (forgets_the_optimizer, r"(?s)rank 0, step 11: the optimizer's momentum buffers are empty: the optimizer started "
                            r"fresh.*optimizer\.state_dict\(\)"),
    # the same evidence (the state of a fresh seed) when the RNG state is saved and restored, then seeded over
    (forgets_the_rng, r"(?s)rank 0, step 11: the resumed run started from the random number generator state the "
                      r"uninterrupted run had at step 0.*never took effect.*capture_rng.*torch.manual_seed would "
                      r"overwrite it"),
    (forgets_the_model, r"(?s)rank 0, step 11: the resumed run started from the parameters the uninterrupted run had "
                        r"at step 0.*model.load_state_dict"),
    (rank_zero_saves_for_everyone, r"(?s)rank 1, step 11: rank 1 resumed with the other rank's RNG state.*each rank "
                                   r"must save its own RNG state"),
    (seeds_every_rank_alike, r"^ranks 0 and 1 entered step 0 of the uninterrupted run with the same random number "
                             r"generator state"),
    (rank_zero_saves_with_one_seed, r"^ranks 0 and 1 entered step 0 of the uninterrupted run with the same random "
                                    r"number generator state"),
    (never_loads, r"(?s)rank 0: after the crash never_loads started again from step 0, although the killed run "
                  r"saved \['rank-0\.pt', 'rank-1\.pt'\].*load the checkpoint"),
    (restarts_the_epoch_from_zero, r"(?s)rank 0 trained step 11 \(epoch 3\) on the batch of step 2, epoch 0's: the "
                                   r"sampler was not set back to epoch 3.*sampler\.set_epoch"),
    (saves_in_place, r"(?s)^rank 0: saves_in_place wrote 'rank-0.pt' with torch.save straight to the name it is "
                     r"loaded from.*atomic_save"),
    (saves_through_an_open_file, r"(?s)^rank 0: saves_through_an_open_file wrote 'rank-0.pt' with torch.save into a "
                                 r"file opened on the name it is loaded from: a kill during the write leaves a torn "
                                 r"file there.*atomic_save"),
    (backs_up_then_saves_in_place, r"(?s)^rank 0: backs_up_then_saves_in_place wrote 'rank-0.pt' with torch.save "
                                   r"straight to the name it is loaded from: .*\(the checkpoint before it was renamed "
                                   r"to 'rank-0.pt.bak', which the restart does not read\).*atomic_save"),
    (copies_a_temporary_file, r"(?s)^rank 0: copies_a_temporary_file copied a file onto 'rank-0.pt', the name it is "
                              r"loaded from, with shutil.copyfile: a copy writes it piece by piece.*Hint: a rename is "
                              r"atomic, a copy is not: .*os.replace"),
    (resumes_from_the_oldest, r"(?s)^rank 0: rank 1 was killed at the start of step 11; the resumed run started at "
                              r"step 1, from 'rank-0-step-000001\.pt', although the killed run also left "
                              r"'rank-0-step-000011\.pt', newer \(the number in its name is higher\)\.\nHint: resume "
                              r"from the newest checkpoint"),
    (saves_every_5_steps, r"(?s)^rank 0: rank 1 was killed at the start of step 11; the resumed run started at step "
                          r"10, from exactly the state that step started from in the uninterrupted run: the "
                          r"checkpoint it resumed from was 1 step old; the uninterrupted run saved it only with 5, 10 "
                          r"and 15 steps done, so step 10 runs twice\.\nHint: save a checkpoint after EVERY step"),
    (resumes_at_a_step_written_in, r"(?s)^rank 0: the resumed run started at step 11, rightly, then was stopped on "
                                   r"both ranks at the start of step 13 and resumes_at_a_step_written_in called again "
                                   r"in the same folder: it started at step 11 again, although steps 11 and 12 had "
                                   r"been done since: the step it resumes at does not come from the checkpoint "
                                   r"\(resumes_at_a_step_written_in's code holds the number 11\)"),
    (latest_by_name, r"(?s)^rank 0: rank 1 was killed at the start of step 11; the resumed run started at step 9, "
                     r"from 'rank-0-step-9\.pt', although the killed run also left 'rank-0-step-11\.pt', newer.*"
                     r"Hint: pick the checkpoint by its step as a number"),
    (never_sets_the_epoch, r"(?s)^rank 0: the uninterrupted run trained every epoch on epoch 0's batches, in the same "
                           r"order.*sampler\.set_epoch\(epoch\)"),
    (numbers_later_epochs_one_too_high, r"(?s)^rank 0 trained step 12 on a batch the uninterrupted run never used "
                                        r"at any step: the data stream was not resumed"),
    (skips_in_every_later_epoch, r"(?s)^rank 0 trained the resumed step 11 on the uninterrupted run's batches, but "
                                 r"step 12, the first of epoch 4, on the batch the uninterrupted run used at step "
                                 r"14, 2 batches later in that epoch\.\nHint: "
                                 r"skipping the batches already done \(2 on this resume\) applies to the epoch the "
                                 r"run resumes in only"),
    (islices_a_data_loader, r"(?s)^rank 0, step 11: the resumed run started from the random number generator state the "
                            r"uninterrupted run had at step 11, advanced by 1 64-bit random number: something drew "
                            r"from the global RNG between the restore and the step.*Hint: a DataLoader draws one to "
                            r"seed itself"),
])
def test_rejects_checkpoints_that_lose_state(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_restartable(answer)


def test_names_a_checkpoint_taken_once_per_epoch():
    # killed at the start of step 11, the last checkpoint is step 9's epoch start: the resumed run starts at 9 with the
    # right state, which tells it from a miscounted step (whose state would be one step ahead)
    with pytest.raises(CheckFailed, match=r"(?s)the resumed run started at step 9, from exactly the state that step "
                                          r"started from.*the uninterrupted run saved it only with 3, 6, 9, 12 and 15 "
                                          r"steps done, so steps 9 and 10 run twice.*save a checkpoint after EVERY "
                                          r"step"):
        check_restartable(saves_once_per_epoch)


def test_names_checkpoints_written_outside_the_directory():
    shutil.rmtree(ELSEWHERE, ignore_errors=True)
    os.makedirs(ELSEWHERE)
    try:
        with pytest.raises(CheckFailed, match=r"(?s)^the killed run left nothing in its `directory`, yet a later run "
                                              r"of saves_outside_the_directory started at step .*inside the directory"):
            check_restartable(saves_outside_the_directory)
    finally:
        shutil.rmtree(ELSEWHERE, ignore_errors=True)


def three_batches_an_epoch_written(rank, directory, total_steps, step_fn):
    """Resumes exactly, with 2 ranks: 3 batches an epoch written in, where the number of ranks decides it."""
    model, optimizer, sampler = _setup(rank)
    path = os.path.join(directory, f"rank-{rank}.pt")
    step = _load(path, model, optimizer) if os.path.exists(path) else 0
    per_epoch = 3
    while step < total_steps:
        epoch, position = divmod(step, per_epoch)
        sampler.set_epoch(epoch)
        for batch in torch.tensor(list(sampler)).split(BATCH)[position:]:
            if step == total_steps:
                break
            step_fn(step, model, optimizer, X[batch], Y[batch])
            step += 1
            _save(path, model, optimizer, step)
            dist.barrier()


def epoch_of_the_step_written(rank, directory, total_steps, step_fn):
    model, optimizer, sampler = _setup(rank)
    path = os.path.join(directory, f"rank-{rank}.pt")
    step = _load(path, model, optimizer) if os.path.exists(path) else 0
    while step < total_steps:
        sampler.set_epoch(step // 3)
        for batch in torch.tensor(list(sampler)).split(BATCH)[step % 3:]:
            if step == total_steps:
                break
            step_fn(step, model, optimizer, X[batch], Y[batch])
            step += 1
            _save(path, model, optimizer, step)
            if step % 10 == 0:                        # a remainder alone (logging) is not refused
                print(f"rank {rank}: {step} steps")
            dist.barrier()


def epoch_of_the_data_for_two_ranks(rank, directory, total_steps, step_fn):
    """The epoch length computed from the data, with the number of ranks written in: 24 // (4 * 2) = 3."""
    per_epoch = len(X) // (BATCH * 2)
    for step in range(total_steps):
        epoch, position = divmod(step, per_epoch)


def epoch_of_the_data_over_eight(rank, directory, total_steps, step_fn):
    for step in range(total_steps):
        epoch, position = step // (len(X) // 8), step % (len(X) // 8)


def epoch_rounded_up_for_two_ranks(rank, directory, total_steps, step_fn):
    per_epoch = math.ceil(len(X) / 2 / BATCH)
    for step in range(total_steps):
        epoch, position = divmod(step, per_epoch)


def world_size_of_its_own(rank, directory, total_steps, step_fn):
    world_size = 2
    per_epoch = len(X) // BATCH // world_size
    for step in range(total_steps):
        epoch, position = divmod(step, per_epoch)


@pytest.mark.parametrize("answer, feedback", [
    (epoch_of_the_data_for_two_ranks, r"^epoch_of_the_data_for_two_ranks divides a step count by per_epoch = 3, "
                                      r"computed from constants alone \(`per_epoch = len\(X\) // \(BATCH \* 2\)`, "
                                      r"then `epoch, position = divmod\(step, per_epoch\)`\): nothing in it changes "
                                      r"with the number of ranks\.\nHint: divide by the batches of an epoch, counted "
                                      r"from the sampler"),
    (epoch_of_the_data_over_eight, r"^epoch_of_the_data_over_eight divides a step count by len\(X\) // 8 = 3, "
                                   r"computed from constants alone \(`epoch, position = step // \(len\(X\) // 8\), "),
    (epoch_rounded_up_for_two_ranks, r"^epoch_rounded_up_for_two_ranks divides a step count by per_epoch = 3, "
                                     r"computed from constants alone \(`per_epoch = math.ceil"),
    (world_size_of_its_own, r"^world_size_of_its_own divides a step count by per_epoch = 3, computed from constants "
                            r"alone \(`per_epoch = len\(X\) // BATCH // world_size`"),
])
def test_an_epoch_length_computed_for_two_ranks_is_refused_before_any_rank_starts(answer, feedback, monkeypatch):
    """An epoch length computed from the data with the number of ranks written in (2, or 8 = BATCH x 2) resumes
    right with 2 ranks, wrong with any other number: it passed (only a bare number was read)."""
    monkeypatch.setattr(lesson12, "launch", None)          # starting ranks would raise TypeError
    monkeypatch.setattr(lesson12, "run_on_ranks", None)
    with pytest.raises(CheckFailed, match=feedback):
        check_restartable(answer)


def epoch_of_the_whole_dataset(rank, directory, total_steps, step_fn):
    """The epoch length from the sampler's whole dataset: every rank counts 6 batches where it gets 3, and a loop
    over an epoch's batches from `position` waits, out of batches at position 3, for the rest that never come."""
    model, optimizer, sampler = _setup(rank)
    per_epoch = len(sampler.dataset) // BATCH
    for step in range(total_steps):
        epoch, position = divmod(step, per_epoch)


def test_an_epoch_counted_from_the_whole_dataset_is_refused_before_any_rank_starts(monkeypatch):
    """len(sampler.dataset) counts every rank's batches: the run would spin until the check's timeout (60 s) before
    saying anything; read from the source, it is named at once."""
    monkeypatch.setattr(lesson12, "launch", None)          # starting ranks would raise TypeError
    monkeypatch.setattr(lesson12, "run_on_ranks", None)
    with pytest.raises(CheckFailed, match=r"^epoch_of_the_whole_dataset divides a step count by per_epoch, which "
                                          r"counts the batches of the whole dataset \(`per_epoch = len\(sampler\."
                                          r"dataset\) // BATCH`, then `epoch, position = divmod\(step, per_epoch\)`\)"
                                          r": the sampler hands each rank only its share.*\nHint: count the batches "
                                          r"of an epoch from the sampler itself \(len\(sampler\) and BATCH\)\.$"):
        check_restartable(epoch_of_the_whole_dataset)


def test_the_whole_dataset_reader_leaves_a_ranks_share_alone():
    """A rank's batches counted from the sampler, or from the whole dataset over the number of ranks, are right; the
    whole dataset times the ranks, or with the ranks named beside it, is not."""
    def from_the_sampler(rank, directory, total_steps, step_fn):
        model, optimizer, sampler = _setup(rank)
        per_epoch = len(sampler) // BATCH
        for step in range(total_steps):
            epoch, position = divmod(step, per_epoch)

    def over_the_ranks(rank, directory, total_steps, step_fn):
        model, optimizer, sampler = _setup(rank)
        per_epoch = len(sampler.dataset) // (BATCH * dist.get_world_size())
        for step in range(total_steps):
            epoch, position = divmod(step, per_epoch)

    def over_a_named_world_size(rank, directory, total_steps, step_fn):
        model, optimizer, sampler = _setup(rank)
        world_size = dist.get_world_size()
        batches = len(sampler.dataset) // world_size
        for step in range(total_steps):
            epoch = step // (batches // BATCH)

    def over_a_constant_world_size(rank, directory, total_steps, step_fn):      # a notebook's WORLD_SIZE
        model, optimizer, sampler = _setup(rank)
        per_epoch = len(sampler.dataset) // (BATCH * WORLD_SIZE)     # read, never run
        for step in range(total_steps):
            epoch, position = divmod(step, per_epoch)

    def times_the_ranks(rank, directory, total_steps, step_fn):            # wrong: more batches, not fewer
        model, optimizer, sampler = _setup(rank)
        per_epoch = len(sampler.dataset) * dist.get_world_size() // BATCH
        for step in range(total_steps):
            epoch, position = divmod(step, per_epoch)

    def ranks_named_beside(rank, directory, total_steps, step_fn):         # wrong: the ranks named, not divided by
        model, optimizer, sampler = _setup(rank)
        world_size = dist.get_world_size()
        per_epoch = len(sampler.dataset) // BATCH + 0 * world_size
        for step in range(total_steps):
            epoch, position = divmod(step, per_epoch)

    for right in (from_the_sampler, over_the_ranks, over_a_named_world_size, over_a_constant_world_size):
        assert lesson12.whole_dataset_divisor(right, ("step",), ("total",)) is None, right.__name__
    for wrong in (epoch_of_the_whole_dataset, times_the_ranks, ranks_named_beside):
        assert lesson12.whole_dataset_divisor(wrong, ("step",), ("total",)) is not None, wrong.__name__


@pytest.mark.parametrize("answer, feedback", [
    (three_batches_an_epoch_written, r"^three_batches_an_epoch_written divides a step count by 3, a number written in "
                                     r"the code \(`per_epoch = 3`, then `epoch, position = divmod\(step, "
                                     r"per_epoch\)`\)\.\nHint: divide by the batches of an epoch, counted from the "
                                     r"sampler"),
    (epoch_of_the_step_written, r"^epoch_of_the_step_written divides a step count by 3, a number written in the code "
                                r"\(`sampler\.set_epoch\(step // 3\)`\)\.\nHint: .*which the number of ranks "
                                r"decides"),
])
def test_a_number_of_batches_an_epoch_written_is_refused_before_any_rank_starts(answer, feedback, monkeypatch):
    monkeypatch.setattr(lesson12, "launch", None)          # starting ranks would raise TypeError
    monkeypatch.setattr(lesson12, "run_on_ranks", None)
    with pytest.raises(CheckFailed, match=feedback):
        check_restartable(answer)


def samples_seen_over_the_data(rank, directory, total_steps, step_fn):
    """The epoch from the samples all ranks have seen (the ranks are in the dividend), and a percentage printed."""
    world_size = dist.get_world_size()
    for step in range(total_steps):
        epoch = step * BATCH * world_size // len(X)
        print(f"{100 * step / len(X):.0f}% of the data, epoch {epoch}")


def test_the_epoch_length_reader_leaves_counts_from_the_data_alone():
    assert numeric_divisor(train, ("step",), ("total",)) is None

    def counts_from_the_sampler(rank, directory, total_steps, step_fn):
        sampler = DistributedSampler(range(len(X)), num_replicas=2, rank=rank)
        per_epoch = math.ceil(len(sampler) / BATCH)
        done = 0
        for step in range(done, total_steps):
            epoch, position = divmod(step, per_epoch)
            if step % 5 == 0:
                print(epoch, position, total_steps // 2)
    assert numeric_divisor(counts_from_the_sampler, ("step",), ("total",)) is None
    for counts in (train, counts_from_the_sampler, islices_a_data_loader, picks_the_step_by_its_number,
                   samples_seen_over_the_data):
        assert computed_divisor(counts, ("step",), ("total",)) is None, counts.__name__   # the sampler's, the loader's
