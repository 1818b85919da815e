"""The lesson 03 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part
of the feedback that names it. Everything runs in this process (threads, no ranks).
"""

from __future__ import annotations

import copy
import threading
import time

import pytest
import torch
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, lesson03
from ddp_lab.checks.lesson03 import check_data_parallel_loss, check_scatter_gather

# The right answers are proven once, by nbval of solutions/03-*.ipynb (its check cells store ✓):
# this file tries the wrong ones and the cases the solution does not cover.


# --- scatter / gather ---------------------------------------------------------------------

def scatter_batch(tensors, n):
    return list(zip(*[torch.chunk(t, n, dim=0) for t in tensors]))


def gather_outputs(outputs):
    return torch.cat(outputs, dim=0)


def scatter_tensor_split(tensors, n):
    """Balanced sizes (3-3-2-2): valid splitting, but not what DataParallel does."""
    return list(zip(*[torch.tensor_split(t, n, dim=0) for t in tensors]))


def scatter_per_tensor(tensors, n):
    """Forgot to regroup: one list of chunks per tensor instead of one tuple per device."""
    return [torch.chunk(t, n, dim=0) for t in tensors]


def scatter_strided(tensors, n):
    """Round-robin rows (x[k::n]): right sizes for 12 over 3, wrong rows."""
    size = -(-len(tensors[0]) // n)
    return [tuple(t[k::n] for t in tensors) for k in range(n) if k < len(tensors[0])][: -(-len(tensors[0]) // size)]


def scatter_split_by_size(tensors, n):
    """torch.split(t, n): n read as a chunk size, not a count (chunks of 4 rows for 10 over 4)."""
    return list(zip(*[torch.split(t, n) for t in tensors]))


def scatter_mask_whole(tensors, n):
    """The inputs and labels split, the mask handed whole to every device."""
    x, labels, mask = tensors
    return [(xs, ls, mask) for xs, ls in zip(torch.chunk(x, n), torch.chunk(labels, n))]


def scatter_floor_sizes(tensors, n):
    """floor(B/n) rows per device, the remainder on the last (2-2-2-4 for 10 over 4): neither chunk nor tensor_split."""
    size = len(tensors[0]) // n or 1
    bounds = [min(k * size, len(tensors[0])) for k in range(n)] + [len(tensors[0])]
    return [tuple(t[a:b] for t in tensors) for a, b in zip(bounds, bounds[1:]) if b > a]


def scatter_labels_as_floats(tensors, n):
    """Every tensor made float before the split: the labels' values survive, their dtype (int64) does not."""
    return list(zip(*[torch.chunk(t.float(), n) for t in tensors]))


def scatter_tensors_reversed(tensors, n):
    """Each device's chunks in the reverse order of the tensors given: (mask, labels, x)."""
    return list(zip(*[torch.chunk(t, n) for t in reversed(tensors)]))


def scatter_devices_reversed(tensors, n):
    """torch.chunk's chunks, the last device's first."""
    return list(zip(*[torch.chunk(t, n) for t in tensors]))[::-1]


def gather_dim1(outputs):
    return torch.cat(outputs, dim=1)


def gather_stacked(outputs):
    return torch.stack(outputs)


def gather_without_the_last(outputs):
    return torch.cat(outputs[:-1])


def gather_summed(outputs):
    return sum(outputs)


def gather_reversed(outputs):
    return torch.cat(outputs[::-1], dim=0)


def gather_in_float64(outputs):
    return torch.cat(outputs, dim=0).double()


def gather_in_float16(outputs):
    return torch.cat(outputs, dim=0).half()


@pytest.mark.parametrize("scatter, gather, feedback", [
    (scatter_tensor_split, gather_outputs, r"(?s)tensor 0's rows per device \[3, 3, 2, 2\], expected \[3, 3, 3, 1\]"
                                           r".*these are torch.tensor_split's balanced sizes; DataParallel splits "
                                           r"like torch.chunk"),
    (scatter_mask_whole, gather_outputs, r"(?s)device 0, tensor 2: got shape \(10, 2, 2\), expected \(3, 2, 2\) "
                                         r"\(tensor 2's rows per device \[10, 10, 10, 10\].*Hint: tensor 2 was not "
                                         r"split: device 0 got all 10 of its rows"),
    # sizes that are not tensor_split's: the hint does not name it
    (scatter_floor_sizes, gather_outputs, r"(?s)rows per device \[2, 2, 2, 4\], expected \[3, 3, 3, 1\]\)\.\nHint: "
                                          r"DataParallel splits like torch.chunk: ceil\(B/n\) rows per device, the "
                                          r"last one smaller\.$"),
    (scatter_per_tensor, gather_outputs, r"one per \*tensor\*; expected 4, one per device"),
    (scatter_strided, gather_outputs, r"(?s)right shape, wrong rows.*contiguous slice"),
    (scatter_split_by_size, gather_outputs, r"(?s)10 rows .* over 4 devices: got chunks of \[4, 4, 2\] rows, "
                                            r"expected \[3, 3, 3, 1\].*chunks of 4 rows, n read as a chunk SIZE, "
                                            r"as torch\.split\(t, 4\) reads it; torch\.chunk\(t, 4\) takes the "
                                            r"NUMBER of chunks"),
    # torch.equal compares values alone: 10 in float32 equals 10 in int64
    (scatter_labels_as_floats, gather_outputs, r"^scattering a batch of 10 rows \(3 tensors\) over 4 devices: device "
                                               r"0, tensor 1: got float32, expected int64 \(that tensor's dtype\)\.\n"
                                               r"Hint: scattering only splits: every chunk keeps its tensor's dtype"),
    # the right chunks in another place: the order is named, not the split along dim 0 or torch.chunk's sizes
    (scatter_tensors_reversed, gather_outputs, r"^scattering .*: device 0, tensor 0: got tensor 2's chunk \(shape "
                                               r"\(3, 2, 2\)\), expected tensor 0's \(shape \(3, 3\)\)\.\nHint: keep "
                                               r"the order of the tensors given"),
    (scatter_devices_reversed, gather_outputs, r"^scattering .*: the devices got torch.chunk's chunks in the order "
                                               r"\[3, 2, 1, 0\], expected \[0, 1, 2, 3\]\.\nHint: device k takes the "
                                               r"k-th chunk of every tensor"),
    (scatter_batch, gather_dim1, r"concatenate along dim 0"),
    # rows concatenated along dim 0, but not every output's once, or no concatenation: not 'concatenate along dim 0'
    (scatter_batch, gather_stacked, r"^gathering 3 outputs of \[4, 4, 4\] rows: got shape \(3, 4, 3\), expected "
                                    r"\(12, 3\)\.\nHint: torch.stack puts the outputs side by side in a new dimension"),
    (scatter_batch, gather_without_the_last, r"^gathering 3 outputs of \[4, 4, 4\] rows: got shape \(8, 3\), "
                                             r"expected \(12, 3\)\.\nHint: got 8 rows, expected 12: the rows of all 3 "
                                             r"outputs \(\[4, 4, 4\]\), each once \(output 2 left out\)\.$"),
    (scatter_batch, gather_summed, r"^gathering .*: got shape \(4, 3\), expected \(12, 3\)\.\nHint: this is the "
                                   r"outputs added element by element \(sum\(outputs\)\)"),
    (scatter_batch, gather_reversed, r"(?s)rows are out of order.*device 0 first"),
    # torch.equal compares values alone: the dtype is judged first, and the rows are not said to be out of order
    (scatter_batch, gather_in_float64, r"^gathering 3 outputs of \[4, 4, 4\] rows: gather_outputs returned float64, "
                                       r"expected float32 \(the outputs' dtype\)\.\nHint: concatenating keeps the "
                                       r"outputs' dtype \(torch.cat\): return the batch without converting it\.$"),
    (scatter_batch, gather_in_float16, r"^gathering 3 outputs of \[4, 4, 4\] rows: gather_outputs returned float16, "
                                       r"expected float32 \(the outputs' dtype\)"),
])
def test_scatter_gather_rejects_wrong_answers(scatter, gather, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_scatter_gather(scatter, gather)


def scatter_every_nth_row(tensors, n):
    """Round-robin rows for every case (t[k::n]): device 0 of 10 rows over 4 gets rows 0, 4 and 8, torch.chunk's size,
    and its first row is the right one."""
    return [tuple(t[k::n] for t in tensors) for k in range(min(n, len(tensors[0])))]


def scatter_one_chunk_fewer(tensors, n):
    """torch.chunk(t, n - 1): 3 chunks of 10 rows are [4, 4, 2], which torch.split(t, 4) makes too, and 3 entries
    for 3 tensors; with 12 rows over 3 it makes 2 chunks of 6, which torch.split(t, 3) does not."""
    return list(zip(*[torch.chunk(t, max(n - 1, 1)) for t in tensors]))


def test_scatter_names_the_batch_rows_a_device_got():
    """The rows are named by their place in the batch, never as 'first row [0.0, 1.0, 2.0], expected [0.0, 1.0, 2.0]'
    where the first rows agree."""
    with pytest.raises(CheckFailed, match=r"^scattering a batch of 10 rows \(3 tensors\) over 4 devices: device 0, "
                                          r"tensor 0: right shape, wrong rows \(rows \[0, 4, 8\] of the batch, "
                                          r"expected rows \[0, 1, 2\]\)\.\nHint: each device takes a contiguous "
                                          r"slice"):
        check_scatter_gather(scatter_every_nth_row, gather_outputs)


def test_scatter_names_a_chunk_size_or_chunks_per_tensor_only_where_every_case_shows_it():
    """Chunks that match torch.split(t, n) in one case only, and one entry per tensor that holds a device's chunk of
    every tensor, are told as the count they are, not as n read as a chunk SIZE or as one entry per tensor."""
    with pytest.raises(CheckFailed) as failure:
        check_scatter_gather(scatter_one_chunk_fewer, gather_outputs)
    message = str(failure.value)
    assert message.startswith("scattering a batch of 10 rows (3 tensors) over 4 devices: got 3 chunks, expected 4 "
                              "(torch.chunk gives [3, 3, 3, 1] rows)."), message
    assert "SIZE" not in message and "one per *tensor*" not in message, message


def scatter_into_a_written_count(tensors, n):
    return list(zip(*[torch.chunk(t, 4, dim=0) for t in tensors]))   # the first case's 4 devices, written in


def loss_over_a_written_count(model, x, y, n):
    outputs = [model(chunk) for chunk in x.chunk(4)]                  # the check's 4 devices, written in
    return F.mse_loss(torch.cat(outputs), y)


def test_a_count_of_devices_written_in_the_code_is_refused_before_anything_runs():
    # 12 rows in 4 chunks are also 3 chunks of 3 rows (torch.split's mistake): the source tells the two apart
    with pytest.raises(CheckFailed, match=r"^scatter_batch splits a tensor into 4, a number written in the code "
                                          r"\(`.*torch\.chunk\(t, 4, dim=0\).*`\)\.\nHint: split into n, the "
                                          r"number of devices"):
        check_scatter_gather(scatter_into_a_written_count, gather_outputs)
    with pytest.raises(CheckFailed, match=r"^data_parallel_loss splits a tensor into 4, a number written in the code "
                                          r"\(`outputs = \[model\(chunk\) for chunk in x\.chunk\(4\)\]`\)"):
        check_data_parallel_loss(loss_over_a_written_count)


def test_scatter_gather_names_an_unwritten_answer():
    def unwritten(tensors, n):
        raise NotImplementedError("chunk every tensor")
    with pytest.raises(CheckFailed, match=r"not written yet.*chunk every tensor"):
        check_scatter_gather(unwritten, gather_outputs)


# --- data-parallel forward + loss ----------------------------------------------------------

def _run_threads(replicas, chunks, parallel=True):
    outputs, errors = [None] * len(chunks), []

    def work(k):
        try:
            module, params = replicas[k]
            outputs[k] = torch.func.functional_call(module, params, (chunks[k],))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(chunks))]
    if parallel:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for thread in threads:  # start, join, start, join: one at a time
            thread.start()
            thread.join()
    if errors:
        raise errors[0]
    return outputs


def _replicas(model, chunks, values_only=False):
    def copy_of(p):
        return p.detach().clone().requires_grad_() if values_only else p.clone()
    return [(copy.deepcopy(model), {name: copy_of(p) for name, p in model.named_parameters()}) for _ in chunks]


def data_parallel_loss(model, x, y, n):
    chunks = torch.chunk(x, n)
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), chunks)), y)


def loss_with_deepcopy_replicas(model, x, y, n):
    chunks = torch.chunk(x, n)
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks, values_only=True), chunks)), y)


def mean_of_chunk_losses(model, x, y, n):
    chunks, targets = torch.chunk(x, n), torch.chunk(y, n)
    outputs = _run_threads(_replicas(model, chunks), chunks)
    return torch.stack([F.mse_loss(o, t) for o, t in zip(outputs, targets)]).mean()


def sequential_threads(model, x, y, n):
    chunks = torch.chunk(x, n)
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), chunks, parallel=False)), y)


def _threads_each(work, count):
    threads = [threading.Thread(target=work, args=(k,)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def gathered_as_finished(model, x, y, n):
    chunks, outputs = torch.chunk(x, n), []
    replicas = _replicas(model, chunks)
    _threads_each(lambda k: outputs.append(torch.func.functional_call(*replicas[k], (chunks[k],))), len(chunks))
    return F.mse_loss(torch.cat(outputs), y)         # in the order the threads finished


def one_shared_replica(model, x, y, n):
    chunks = torch.chunk(x, n)
    shared = _replicas(model, chunks[:1])[0]          # one module and one set of parameters for every thread
    return F.mse_loss(torch.cat(_run_threads([shared] * len(chunks), chunks)), y)


def threads_run_the_model(model, x, y, n):
    chunks, outputs = torch.chunk(x, n), [None] * n
    _threads_each(lambda k: outputs.__setitem__(k, model(chunks[k])), len(chunks))
    return F.mse_loss(torch.cat(outputs), y)


def split_not_chunk(model, x, y, n):
    chunks = torch.split(x, n)                        # chunks of n rows, not n chunks
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), chunks)), y)


def tensor_split_not_chunk(model, x, y, n):
    chunks = torch.tensor_split(x, n)                 # balanced sizes 3-3-2-2, not torch.chunk's 3-3-3-1
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), chunks)), y)


def chunk_index_off_by_one(model, x, y, n):
    chunks = torch.chunk(x, n)
    shifted = [chunks[k - 1] for k in range(len(chunks))]   # thread k takes chunk k - 1
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), shifted)), y)


def gathered_in_reverse(model, x, y, n):
    chunks = torch.chunk(x, n)
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), chunks)[::-1]), y)


def thread_given_the_result(model, x, y, n):
    chunks, outputs = torch.chunk(x, n), [None] * n
    replicas = _replicas(model, chunks)

    def work(k):
        outputs[k] = torch.func.functional_call(*replicas[k], (chunks[k],))

    threads = [threading.Thread(target=work(k)) for k in range(len(chunks))]   # work(k) runs here; target=None
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return F.mse_loss(torch.cat(outputs), y)


def summed_loss(model, x, y, n):
    chunks = torch.chunk(x, n)
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), chunks)), y, reduction="sum")


def no_threads_at_all(model, x, y, n):
    return F.mse_loss(torch.cat([model(c) for c in torch.chunk(x, n)]), y)


def threads_counted_to_n(model, x, y, n):
    """One thread per device, not per chunk: 6 rows over 4 devices make 3 chunks, thread 3 finds none."""
    chunks = torch.chunk(x, n)
    replicas, outputs, errors = _replicas(model, chunks), [None] * len(chunks), []

    def work(k):
        try:
            outputs[k] = torch.func.functional_call(*replicas[k], (chunks[k],))
        except BaseException as error:
            errors.append(error)

    _threads_each(work, n)
    if errors:
        raise errors[0]
    return F.mse_loss(torch.cat(outputs), y)


def outputs_sized_by_n(model, x, y, n):
    """n replicas, n output slots, n threads: the last slot stays None when there are fewer chunks."""
    chunks = torch.chunk(x, n)
    replicas, outputs = _replicas(model, range(n)), [None] * n

    def work(k):
        if k < len(chunks):
            outputs[k] = torch.func.functional_call(*replicas[k], (chunks[k],))

    _threads_each(work, n)
    return F.mse_loss(torch.cat(outputs), y)


def sliced_by_ceil(model, x, y, n):
    """ceil(B/n) rows per device by slicing, for every device: the fourth slice of 6 rows over 4 is empty."""
    size = -(-len(x) // n)
    chunks = [x[k * size:(k + 1) * size] for k in range(n)]
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), chunks)), y)


def detached_outputs(model, x, y, n):
    chunks = torch.chunk(x, n)
    return F.mse_loss(torch.cat([o.detach() for o in _run_threads(_replicas(model, chunks), chunks)]), y)


def threads_never_joined(model, x, y, n):
    """Threads started, never joined: the outputs are gathered before the replicas have made them."""
    chunks = torch.chunk(x, n)
    replicas, outputs = _replicas(model, chunks), [None] * len(chunks)

    def work(k):
        module, params = replicas[k]
        outputs[k] = torch.func.functional_call(module, params, (chunks[k],))

    for k in range(len(chunks)):
        threading.Thread(target=work, args=(k,)).start()
    return F.mse_loss(torch.cat(outputs), y)


def test_data_parallel_loss_names_threads_never_joined(monkeypatch, capsys):
    """The answer raises (torch.cat of None) while its threads still run: the hint says they were never joined (it
    was torch's TypeError alone), and the threads finish before the check lets go of its chunks, so they print no
    traceback of the check's own (they printed 'ValueError: 2 is not in list' from lesson03.py)."""
    monkeypatch.setattr(lesson03, "BARRIER_SECONDS", 2.0)
    # the threads the answer started and never joined are counted, not the forwards still running (how many of
    # those there are when the answer raises, none at all included, depends on the threads' scheduling)
    with pytest.raises(CheckFailed, match=r"(?s)^data_parallel_loss raised TypeError: .*NoneType\nHint: "
                                          r"data_parallel_loss raised without having joined 4 of the 4 threads it "
                                          r"started: it read the outputs without waiting"):
        check_data_parallel_loss(threads_never_joined)
    time.sleep(0.5)
    assert "Traceback" not in capsys.readouterr().err


def threads_gathered_before_any_forward(model, x, y, n):
    """Threads started, never joined, each held back before its replica's forward: torch.cat raises before any
    forward has started."""
    chunks = torch.chunk(x, n)
    replicas, outputs = _replicas(model, chunks), [None] * len(chunks)

    def work(k):
        time.sleep(0.3)
        module, params = replicas[k]
        outputs[k] = torch.func.functional_call(module, params, (chunks[k],))

    for k in range(len(chunks)):
        threading.Thread(target=work, args=(k,)).start()
    return F.mse_loss(torch.cat(outputs), y)


def test_threads_never_joined_are_named_before_any_forward_ran(monkeypatch):
    """The hint counts the threads the answer started and never joined, so it is there when the answer raises before
    any replica's forward has begun (counting forwards still running gave none, and no hint)."""
    monkeypatch.setattr(lesson03, "BARRIER_SECONDS", 2.0)
    with pytest.raises(CheckFailed, match=r"(?s)^data_parallel_loss raised TypeError: .*NoneType\nHint: "
                                          r"data_parallel_loss raised without having joined 4 of the 4 threads it "
                                          r"started"):
        check_data_parallel_loss(threads_gathered_before_any_forward)


def detached_outputs_made_to_require_grad(model, x, y, n):
    """The outputs cut from the graph, the loss then marked as requiring grad: backward reaches no parameter."""
    chunks = torch.chunk(x, n)
    outputs = [o.detach() for o in _run_threads(_replicas(model, chunks), chunks)]
    return F.mse_loss(torch.cat(outputs), y).requires_grad_()


def whole_batch_to_every_replica(model, x, y, n):
    """Chunks made, but every replica given the whole x."""
    chunks = torch.chunk(x, n)
    outputs = _run_threads(_replicas(model, chunks), [x] * len(chunks))
    return F.mse_loss(torch.cat(outputs)[:len(y)], y)


def replicas_made_without_grad(model, x, y, n):
    chunks = torch.chunk(x, n)
    with torch.no_grad():   # grad mode is per thread: the threads' forwards record a graph, the clones did not
        outputs = _run_threads(_replicas(model, chunks), chunks)
    return F.mse_loss(torch.cat(outputs), y)


def forwards_without_grad(model, x, y, n):
    chunks, outputs = torch.chunk(x, n), [None] * len(torch.chunk(x, n))
    replicas = _replicas(model, chunks)

    def work(k):
        with torch.no_grad():
            outputs[k] = torch.func.functional_call(*replicas[k], (chunks[k],))

    _threads_each(work, len(chunks))
    return F.mse_loss(torch.cat(outputs), y)


def detached_parameters(model, x, y, n):
    chunks = torch.chunk(x, n)
    replicas = [(copy.deepcopy(model), {name: p.detach() for name, p in model.named_parameters()}) for _ in chunks]
    return F.mse_loss(torch.cat(_run_threads(replicas, chunks)), y)


def a_replica_per_device(model, x, y, n):
    """Right: n replicas made (one unused when there are fewer chunks), one thread per chunk."""
    chunks = torch.chunk(x, n)
    return F.mse_loss(torch.cat(_run_threads(_replicas(model, range(n)), chunks)), y)


def runs_backward_itself(model, x, y, n):
    """The loss's backward run inside: the caller's backward then finds the graph freed (it raised torch's
    RuntimeError out of the check)."""
    chunks = torch.chunk(x, n)
    loss = F.mse_loss(torch.cat(_run_threads(_replicas(model, chunks), chunks)), y)
    loss.backward()
    return loss


def sum_of_chunk_losses(model, x, y, n):
    chunks, targets = torch.chunk(x, n), torch.chunk(y, n)
    outputs = _run_threads(_replicas(model, chunks), chunks)
    return sum(F.mse_loss(o, t) for o, t in zip(outputs, targets))


def thread_results_dropped(model, x, y, n):
    """The replicas' outputs returned by the threads' function, which a Thread drops: nothing is gathered."""
    chunks, outputs = torch.chunk(x, n), []
    replicas = _replicas(model, chunks)
    _threads_each(lambda k: torch.func.functional_call(*replicas[k], (chunks[k],)), len(chunks))
    return F.mse_loss(torch.cat(outputs), y)


def _threads_raising(model, x, y, n, count, parameters):
    """`count` threads, none catching what it raises, each running its replica with `parameters(replica)`."""
    chunks = torch.chunk(x, n)
    replicas, outputs = _replicas(model, range(count)), [None] * len(chunks)

    def work(k):
        module, params = replicas[k]
        outputs[k] = torch.func.functional_call(module, parameters(params), (chunks[k],))

    _threads_each(work, count)
    return F.mse_loss(torch.cat(outputs), y)


def parameters_as_a_list(model, x, y, n):
    """functional_call given a list, not a dict: every thread raises, and the answer then gathers None."""
    return _threads_raising(model, x, y, n, len(torch.chunk(x, n)), lambda params: list(params.values()))


def threads_counted_to_n_uncaught(model, x, y, n):
    """n threads for 3 chunks, the last one's IndexError left to threading: the answer returns the right loss."""
    return _threads_raising(model, x, y, n, n, lambda params: params)


def test_data_parallel_loss_names_what_a_thread_raised_not_what_came_of_it(monkeypatch, capsys):
    """A thread's exception is kept for the feedback, with the learner's line: it was printed as a traceback (one
    per thread, of torch's frames and threading's), and the check named only what followed, torch.cat given None,
    or passed an answer whose extra thread raised IndexError after the others had done the work."""
    monkeypatch.setattr(lesson03, "BARRIER_SECONDS", 2.0)
    with pytest.raises(CheckFailed, match=r"(?s)^data_parallel_loss's thread '.*' raised ValueError inside torch: "
                                          r".*dictionaries\nwhile running a replica in a thread of its own \(10 rows "
                                          r"over 4 devices; 4 threads raised\)\.\n.*in work\n.*functional_call.*\n"
                                          r"An exception ends its own thread only: data_parallel_loss went on without "
                                          r"that replica's output and then raised TypeError: .*NoneType\.\nHint: fix "
                                          r"the error in the thread's function"):
        check_data_parallel_loss(parameters_as_a_list)
    with pytest.raises(CheckFailed, match=r"(?s)^10 rows over 4 devices were right; with 6 rows .*data_parallel_loss's "
                                          r"thread '.*' raised IndexError: .*went on without that replica's output and "
                                          r"returned a loss\.\nHint: something counted to n = 4 where there are 3"):
        check_data_parallel_loss(threads_counted_to_n_uncaught)
    assert "Traceback" not in capsys.readouterr().err


def pool_of_two(model, x, y, n):
    """A thread pool with 2 workers for 4 replicas: two at a time, not all at once."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = torch.chunk(x, n)
    replicas = _replicas(model, chunks)
    with ThreadPoolExecutor(max_workers=2) as pool:
        outputs = list(pool.map(lambda k: torch.func.functional_call(*replicas[k], (chunks[k],)), range(len(chunks))))
    return F.mse_loss(torch.cat(outputs), y)


def test_data_parallel_loss_names_a_pool_smaller_than_the_replicas(monkeypatch):
    monkeypatch.setattr(lesson03, "BARRIER_SECONDS", 1.0)   # the first forward waits this long for the others
    with pytest.raises(CheckFailed, match=r"(?s)^the replicas did not all run at the same time: \d forwards ran in 2 "
                                          r"threads, so at most 2 at once.*Hint: one thread per replica"):
        check_data_parallel_loss(pool_of_two)


def test_data_parallel_loss_accepts_a_spare_replica():
    check_data_parallel_loss(a_replica_per_device)


@pytest.mark.parametrize("answer, feedback", [
    (loss_with_deepcopy_replicas, r"(?s)no gradient: the gradients stayed in the replicas.*deepcopy"),
    (mean_of_chunk_losses, r"(?s)loss .*expected .*short last chunk"),
    (sequential_threads, r"(?s)did not run at the same time.*start, join, start, join"),
    (no_threads_at_all, r"(?s)did not run at the same time: every forward ran in the thread that called "
                        r"data_parallel_loss.*a plain loop runs the replicas one after the other"),
    (gathered_as_finished, r"(?s)loss .*expected .*Hint: the outputs were gathered out of chunk order: in the "
                           r"order the threads finished \(chunks 1, 3, 0, 2 here\)"),
    # the finishing order is neither chunk order, nor its reverse, nor a rotation: these say what they gathered
    (gathered_in_reverse, r"(?s)loss .*Hint: the gathered batch holds the chunks' outputs in the order 3, 2, 1, 0, "
                          r"expected 0, 1, 2, 3\. Replica k runs chunks\[k\]"),
    (chunk_index_off_by_one, r"(?s)loss .*Hint: the gathered batch holds the chunks' outputs in the order 3, 0, 1, "
                             r"2, .*Position k holds chunk k - 1's output.*an index off by one"),
    (one_shared_replica, r"(?s)^4 chunks ran on 1 module\(s\): threads shared a replica"),
    (threads_run_the_model, r"(?s)^the threads ran the model itself, not replicas of it"),
    (split_not_chunk, r"(?s)^the replicas ran on chunks of \[2, 4, 4\] rows; DataParallel scatters with "
                      r"torch.chunk\(x, n\), \[3, 3, 3, 1\] rows"),
    # two chunks match torch.chunk's (3 rows), two do not: the scatter is named, not the threads
    (tensor_split_not_chunk, r"(?s)^the replicas ran on chunks of \[2, 2, 3, 3\] rows; DataParallel scatters with "
                             r"torch.chunk\(x, n\).*torch.tensor_split balances the sizes"),
    (summed_loss, r"(?s)loss .*Hint: F.mse_loss\(torch.cat\(outputs\), y\) once"),
    # 10 rows over 4 devices make 4 chunks, so these pass the first case and fail the second (3 chunks of 2 rows)
    (threads_counted_to_n, r"(?s)^10 rows over 4 devices were right; with 6 rows over 4 devices torch.chunk makes 3 "
                           r"chunks of 2 rows.*raised IndexError.*Hint: something counted to n = 4 where there are 3 "
                           r"chunks"),
    (outputs_sized_by_n, r"(?s)^10 rows over 4 devices were right; .*raised TypeError.*NoneType.*Hint: something "
                         r"counted to n = 4 where there are 3 chunks"),
    (sliced_by_ceil, r"(?s)^10 rows over 4 devices were right; .*the replicas ran on chunks of \[0, 2, 2, 2\] rows"),
    (detached_outputs, r"(?s)^the loss does not require grad.*differentiable copies of the parameters and grad mode "
                       r"on, so the graph was cut after the forwards"),
    (forwards_without_grad, r"(?s)^the loss does not require grad.*Hint: a replica's forward ran under torch.no_grad"),
    # the replicas were right: the cut after them is named, not the replicas
    (detached_outputs_made_to_require_grad, r"(?s)^after loss.backward\(\) the model's own parameters have no "
                                            r"gradient\. Every replica ran with differentiable copies of the "
                                            r"parameters and grad mode on, so the graph was cut after the forwards"),
    (whole_batch_to_every_replica, r"(?s)^every replica ran on the whole batch \(10 rows\), none on a chunk of it "
                                   r"\(\[3, 3, 3, 1\] rows here\)\.\nHint: replica k runs chunk k"),
    (runs_backward_itself, r"^the model's parameters had gradients already when data_parallel_loss returned: it ran "
                           r"backward itself.*\nHint: return the loss without calling backward\(\)"),
    (sum_of_chunk_losses, r"(?s)^loss .*Hint: this is the SUM of the 4 chunks' losses"),
    (thread_results_dropped, r"(?s)^data_parallel_loss raised (ValueError|RuntimeError): .*non-empty list.*\nHint: all 4 replica "
                             r"forwards ran and returned, but torch.cat got an empty list: a Thread drops what its "
                             r"target returns"),
    (replicas_made_without_grad, r"(?s)^the loss does not require grad.*Hint: the replicas ran with parameters "
                                 r"that are not computed from the model's own.*copies made under torch.no_grad"),
    (detached_parameters, r"(?s)^the loss does not require grad.*Hint: the replicas ran with parameters that are not "
                          r"computed from the model's own"),
])
def test_data_parallel_loss_rejects_wrong_answers(answer, feedback, monkeypatch):
    # an answer that breaks the barrier waits this long for replicas that never come (5 s for a learner); the threads
    # of one that runs them all at once arrive within milliseconds
    monkeypatch.setattr(lesson03, "BARRIER_SECONDS", 2.0)
    with pytest.raises(CheckFailed, match=feedback):
        check_data_parallel_loss(answer)


def test_data_parallel_loss_names_a_thread_given_the_functions_result(monkeypatch):
    # Thread(target=work(k)) runs work(k) in the calling thread while the list is built: no thread ever starts
    monkeypatch.setattr(lesson03, "BARRIER_SECONDS", 1.0)   # the first forward waits this long for the others
    with pytest.raises(CheckFailed, match=r"(?s)^the replicas did not run at the same time: every forward ran in the "
                                          r"thread that called data_parallel_loss.*Hint: the forward ran while "
                                          r"`threads = \[threading.Thread\(target=work\(k\)\).*`target=work\(k\)` "
                                          r"calls work\(k\) right there.*target=work, args=\(k,\)"):
        check_data_parallel_loss(thread_given_the_result)


def threads_read_the_index_late(model, x, y, n):
    """Each thread started in the loop with a lambda that reads k when it runs: right when every thread runs before
    the loop moves on, which the machine's scheduling decides."""
    chunks = torch.chunk(x, n)
    replicas, outputs, threads = _replicas(model, chunks), [None] * len(chunks), []
    for k in range(len(chunks)):
        thread = threading.Thread(target=lambda: outputs.__setitem__(
            k, torch.func.functional_call(*replicas[k], (chunks[k],))))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return F.mse_loss(torch.cat(outputs), y)


def threads_made_in_the_loop_started_after(model, x, y, n):
    """A function defined in the loop, reading k; the threads started after the loop: every one reads the last k."""
    chunks = torch.chunk(x, n)
    replicas, outputs, threads = _replicas(model, chunks), [None] * len(chunks), []
    for k in range(len(chunks)):
        def work():
            outputs[k] = torch.func.functional_call(*replicas[k], (chunks[k],))
        threads.append(threading.Thread(target=work))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return F.mse_loss(torch.cat(outputs), y)


def threads_given_their_index_by_default(model, x, y, n):
    """Right: the lambda's index bound when it is made (k=k); the caller runs chunk 0 itself and waits by polling."""
    chunks = torch.chunk(x, n)
    replicas, outputs = _replicas(model, chunks), [None] * len(chunks)
    threads = [threading.Thread(target=lambda k=k: outputs.__setitem__(
        k, torch.func.functional_call(*replicas[k], (chunks[k],)))) for k in range(1, len(chunks))]
    for thread in threads:
        thread.start()
    outputs[0] = torch.func.functional_call(*replicas[0], (chunks[0],))
    while any(thread.is_alive() for thread in threads):
        time.sleep(0.01)
    return F.mse_loss(torch.cat(outputs), y)


@pytest.mark.parametrize("answer", [threads_read_the_index_late, threads_made_in_the_loop_started_after])
def test_data_parallel_loss_names_threads_that_read_the_index_late(answer, monkeypatch):
    """Every replica ran the last chunk: the threads read k after the loop had moved on. The check holds a started
    thread until the answer waits for it, so a thread started in the loop reads k late on every run, not only on a
    slow machine; the hint names what the chunks show, not torch.cat's TypeError alone."""
    monkeypatch.setattr(lesson03, "BARRIER_SECONDS", 2.0)
    with pytest.raises(CheckFailed, match=r"(?s)^all 4 replica forwards ran on chunk 3 \(the last\) of the 4 chunks, "
                                          r"none on the others\. Then data_parallel_loss raised TypeError: .*\nHint: "
                                          r"each thread read the loop's index when it ran, after the loop had moved "
                                          r"on"):
        check_data_parallel_loss(answer)


def test_data_parallel_loss_accepts_threads_given_their_index_when_made(capsys):
    check_data_parallel_loss(threads_given_their_index_by_default)
    assert capsys.readouterr().out.startswith("✓ data_parallel_loss: loss and gradients == single process")
