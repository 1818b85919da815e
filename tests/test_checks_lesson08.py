"""The lesson 08 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of
the feedback that names it (the rank, the element, the mistake). The answers that return run one
after the other in one launch per exercise (`run_*_answers`: 2 gloo ranks; for row_parallel_forward,
2 ranks then 3), each judged alone (`judge_*`) as the public check judges its one answer; an answer
that raises ends its launch, so each of those runs alone through the public check.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson08
from ddp_lab.checks.lesson08 import check_copy_to_model_parallel_region, check_row_parallel_forward
from ddp_lab.course.tensor_parallel.communications import CopyToModelParallelRegion, copy_to_model_parallel_region

# The right answers are proven once, by nbval of solutions/08-*.ipynb (its check cells store ✓):
# this file tries the wrong ones and the cases the solution does not cover.


# --- row_parallel_forward -------------------------------------------------------------------

def row_parallel_forward(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    dist.all_reduce(partial)
    return partial + linear.bias


def bias_on_every_rank(x_local, linear, rank, world_size):
    out = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T + linear.bias
    dist.all_reduce(out)
    return out


def no_all_reduce(x_local, linear, rank, world_size):
    return x_local @ linear.weight.chunk(world_size, dim=1)[rank].T + linear.bias


def averaged(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    dist.all_reduce(partial)
    return partial / world_size + linear.bias


def no_bias(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    dist.all_reduce(partial)
    return partial


def rows_instead_of_columns(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=0)[rank].T
    dist.all_reduce(partial)
    return partial + linear.bias


def only_rank_0_reduces(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    if rank == 0:
        dist.all_reduce(partial)
    return partial + linear.bias


def not_transposed(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank]  # (b, s, 4) @ (6, 4): .T forgotten
    dist.all_reduce(partial)
    return partial + linear.bias


def whole_weight(x_local, linear, rank, world_size):
    partial = torch.nn.functional.linear(x_local, linear.weight)  # the whole (6, 8) weight on 4 features
    dist.all_reduce(partial)
    return partial + linear.bias


def module_without_forward(x_local, linear, rank, world_size):
    class RowParallelLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = linear.weight.chunk(world_size, dim=1)[rank]

        def foward(self, x):  # a typo: nn.Module's own forward raises NotImplementedError
            partial = x @ self.weight.T
            dist.all_reduce(partial)
            return partial + linear.bias

    return RowParallelLinear()(x_local)


def splits_its_input_again(x_local, linear, rank, world_size):
    mine = x_local.chunk(world_size, dim=-1)[rank]   # x_local is already this rank's part
    partial = mine @ linear.weight.chunk(world_size, dim=1)[rank].T
    dist.all_reduce(partial)
    return partial + linear.bias


def reduces_a_copy(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    dist.all_reduce(partial.clone())                  # the sum lands in the copy, which is dropped
    return partial + linear.bias


def gathers_the_input(x_local, linear, rank, world_size):
    parts = [torch.empty_like(x_local) for _ in range(world_size)]
    dist.all_gather(parts, x_local.contiguous())      # the whole input on every rank: the whole layer, not row parallel
    return linear(torch.cat(parts, dim=-1))


def gathers_the_partials(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    parts = [torch.empty_like(partial) for _ in range(world_size)]
    dist.all_gather(parts, partial)                   # every partial moved, then summed: right numbers, N x the bytes
    return sum(parts) + linear.bias


def shard_width_written(x_local, linear, rank, world_size):
    shard = linear.weight[:, rank * 4:(rank + 1) * 4]    # 4 columns: right for nn.Linear(8, 6) on 2 ranks only
    partial = x_local @ shard.T
    dist.all_reduce(partial)
    return partial + linear.bias


def shard_halves_written(x_local, linear, rank, world_size):
    shard = linear.weight[:, :4] if rank == 0 else linear.weight[:, 4:]   # the halves of 8 columns, written out
    partial = x_local @ shard.T
    dist.all_reduce(partial)
    return partial + linear.bias


def shard_start_written(x_local, linear, rank, world_size):
    start = rank * 4                                     # where the shard starts in nn.Linear(8, 6), written in
    partial = x_local @ linear.weight[:, start:start + x_local.shape[-1]].T
    dist.all_reduce(partial)
    return partial + linear.bias


def shard_from_the_shapes(x_local, linear, rank, world_size):
    """Right: the shard's columns sliced by hand, their count from the layer and the world size."""
    width = linear.in_features // world_size
    partial = x_local @ linear.weight[:, rank * width:(rank + 1) * width].T
    dist.all_reduce(partial)
    return partial + linear.bias


def chunks_into_two(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(2, dim=1)[rank].T   # 2 pieces whatever world_size is
    dist.all_reduce(partial)
    return partial + linear.bias


def width_over_two(x_local, linear, rank, world_size):
    width = linear.in_features // 2                             # the check's 2 ranks, written in
    partial = x_local @ linear.weight[:, rank * width:(rank + 1) * width].T
    dist.all_reduce(partial)
    return partial + linear.bias


def padded_to_the_whole_weight(x_local, linear, rank, world_size):
    """Zeros where the other ranks' features go, times the whole weight: the right sum, every rank doing all of it."""
    width = x_local.shape[-1]
    padded = x_local.new_zeros(*x_local.shape[:-1], linear.in_features)
    padded[..., rank * width:(rank + 1) * width] = x_local
    partial = padded @ linear.weight.T
    dist.all_reduce(partial)
    return partial + linear.bias


def einsum_with_my_columns(x_local, linear, rank, world_size):
    """Right too: einsum over this rank's columns."""
    partial = torch.einsum("bsi,oi->bso", x_local, linear.weight.chunk(world_size, dim=1)[rank])
    dist.all_reduce(partial)
    return partial + linear.bias


def in_float64(x_local, linear, rank, world_size):
    partial = x_local.double() @ linear.weight.chunk(world_size, dim=1)[rank].double().T
    dist.all_reduce(partial)
    return partial + linear.bias.double()


def shard_halves_from_the_shapes(x_local, linear, rank, world_size):
    """Halves of the weight, the width from the shapes: right on 2 ranks only (on 3, rank 1 and 2 take 6 columns)."""
    half = linear.in_features // world_size
    shard = linear.weight[:, :half] if rank == 0 else linear.weight[:, half:]
    partial = x_local @ shard.T
    dist.all_reduce(partial)
    return partial + linear.bias


def swaps_partials_with_the_other_rank(x_local, linear, rank, world_size):
    """An all-reduce by hand with "the other rank": right on 2 ranks; on 3, rank 2's peer is -1."""
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    other = torch.empty_like(partial)
    req = dist.isend(partial, 1 - rank)
    dist.recv(other, 1 - rank)
    req.wait()
    return partial + other + linear.bias


def shards_the_callers_layer(x_local, linear, rank, world_size):
    """The right output, but the caller's nn.Linear now holds this rank's shard."""
    linear.weight.data = linear.weight.data.chunk(world_size, dim=1)[rank]
    partial = x_local @ linear.weight.T
    dist.all_reduce(partial)
    return partial + linear.bias


def adds_the_previous_ranks_partial(x_local, linear, rank, world_size):
    """One step of a ring, the previous rank's partial added: the sum of all of them on 2 ranks, of 2 of 3 on 3."""
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    other = torch.empty_like(partial)
    req = dist.isend(partial, (rank + 1) % world_size)
    dist.recv(other, (rank - 1) % world_size)
    req.wait()
    return partial + other + linear.bias


def sends_its_partial_to_every_rank(x_local, linear, rank, world_size):
    """An all-reduce by hand that holds for any number of ranks: right outputs, send/recv instead of all_reduce."""
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    total = partial.clone()
    requests = [dist.isend(partial, peer) for peer in range(world_size) if peer != rank]
    for peer in range(world_size):
        if peer != rank:
            other = torch.empty_like(partial)
            dist.recv(other, peer)
            total += other
    for request in requests:
        request.wait()
    return total + linear.bias


def first_block_or_the_second(x_local, linear, rank, world_size):
    """Rank 0's columns, or else the second block: right on 2 ranks; on 3, rank 2 multiplies by rank 1's columns."""
    width = x_local.shape[-1]
    shard = linear.weight[:, :width] if rank == 0 else linear.weight[:, width:2 * width]
    partial = x_local @ shard.T
    dist.all_reduce(partial)
    return partial + linear.bias


def reduces_with_max(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    dist.all_reduce(partial, op=dist.ReduceOp.MAX)   # the element-wise max of the partials, not their sum
    return partial + linear.bias


def in_float16_and_back(x_local, linear, rank, world_size):
    """The partial computed and summed in float16, the output turned back into float32: right to 3 digits."""
    partial = x_local.half() @ linear.weight.chunk(world_size, dim=1)[rank].half().T
    dist.all_reduce(partial)
    return (partial + linear.bias.half()).float()


def bias_on_rank_0_only(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    dist.all_reduce(partial)
    return partial + linear.bias if rank == 0 else partial   # "the bias once": on one rank, after the sum


def reduces_to_rank_0(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    dist.reduce(partial, dst=0)                       # the sum on rank 0 only
    return partial + linear.bias


def returns_what_all_reduce_returned(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T + linear.bias / world_size
    return dist.all_reduce(partial)                   # None: it sums in place


def column_parallel_instead(x_local, linear, rank, world_size):
    """The whole input gathered, this rank's output features, all of them gathered: on 3 ranks nn.Linear(9, 7)'s 7
    output features split 3 + 3 + 1, and an all_gather of pieces of different sizes aborts gloo."""
    parts = [torch.empty_like(x_local) for _ in range(world_size)]
    dist.all_gather(parts, x_local.contiguous())
    mine = torch.nn.functional.linear(torch.cat(parts, dim=-1), linear.weight.chunk(world_size, dim=0)[rank],
                                      linear.bias.chunk(world_size)[rank])
    outputs = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(outputs, mine)
    return torch.cat(outputs, dim=-1)


def adds_all_reduces_result(x_local, linear, rank, world_size):
    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    return dist.all_reduce(partial) + linear.bias     # None + the bias: TypeError


def row_stub(x_local, linear, rank, world_size):
    raise NotImplementedError("my shard is linear.weight.chunk(world_size, dim=1)[rank]")


ROW_MISTAKES = [   # answers that return (not raise): they run one after the other in one launch
    (bias_on_every_rank, r"(?s)rank 0, output\[0, 0, 0\]: got .*, expected .*bias is in the sum 2 times: every "
                         r"rank added it before the all-reduce"),
    (no_all_reduce, r"(?s)rank 0, output\[\d+, \d+, \d+\].*rank 0's own partial sum plus the bias.*dist.all_reduce"),
    (averaged, r"(?s)rank 0, output.*MEAN of the partial sums \(a division by the world size, or ReduceOp.AVG\): "
               r"the full output is their SUM"),
    (padded_to_the_whole_weight, r"(?s)^rank 0: the output is right, but padded_to_the_whole_weight computed a matrix "
                                 r"product that sums over all 8 input features of nn.Linear\(8, 6\), not over this "
                                 r"rank's 4.*Hint: multiply x_local as it is \(4 features\) by this rank's columns"),
    (no_bias, r"(?s)rank 0, output\[0, 0, 0\].*the bias is missing.*once, after the all-reduce"),
    # allclose refuses float64 beside float32: the dtype is judged before the values
    (in_float64, r"^rank 0: in_float64 returned a tensor of shape \(3, 5, 6\) and dtype torch.float64; expected "
                 r"torch.float32, the dtype of x_local and linear.weight\.\nHint: nn.Linear's output keeps its "
                 r"input's dtype"),
    (reduces_a_copy, r"(?s)rank 0, output.*rank 0's own partial sum plus the bias: dist.all_reduce ran, but its sum "
                     r"never reached your output"),
    (gathers_the_input, r"rank 0: the output is right, but gathers_the_input called dist\.all_gather; .* one "
                        r"dist\.all_reduce\. It gathered"),
    (gathers_the_partials, r"rank 0: the output is right, but gathers_the_partials called dist\.all_gather; "),
    # right for nn.Linear(8, 6), wrong for nn.Linear(12, 10): rank 1's columns start at 4, not at 6
    (shard_start_written, r"^rank 0, output\[0, 0, 0\] of nn.Linear\(12, 10\) \(x_local of shape \(3, 5, 6\)\): got "
                          r".*, expected .*; right for nn.Linear\(8, 6\)\.\nHint: rank 1's shard starts at column 4 "
                          r"of linear.weight, where it does for nn.Linear\(8, 6\)"),
    (shards_the_callers_layer, r"^rank 0: the output is right, but shards_the_callers_layer changed the caller's "
                               r"layer: linear.weight is now a tensor of shape \(6, 4\) and dtype torch.float32, "
                               r"where the caller's was of shape \(6, 8\)\..*\nHint: take the shard into a tensor of "
                               r"your own"),
    # right on 2 ranks, run on 3 too (same launch): what the second run shows is named, after the first run's verdict
    (adds_the_previous_ranks_partial, r"^rank 0: the output is right, but adds_the_previous_ranks_partial called "
                                      r"dist.isend, dist.recv; .* It exchanged the partial outputs with send/recv "
                                      r"and summed them itself: an all-reduce by hand, which holds for this pair of "
                                      r"ranks only: on 3 ranks \(the check's second run\) rank 0's output is "
                                      r"wrong\.\nHint: "),
    (sends_its_partial_to_every_rank, r"^rank 0: the output is right, but sends_its_partial_to_every_rank called "
                                      r"dist.isend, dist.recv; .* an all-reduce by hand \(its outputs are right on 3 "
                                      r"ranks too\), where the layer's one collective is dist.all_reduce\.\nHint: "),
    # another op than SUM, a lower precision on the way: each named from what the ranks did
    (reduces_with_max, r"^rank 0, output\[0, 0, 0\]: got .*\nHint: this is the element-wise MAX of the partial sums, "
                       r"plus the bias: the full output is their SUM"),
    (in_float16_and_back, r"^rank 0, output\[\d+, \d+, \d+\]: got .*\nHint: the output is linear\(x\) to a few digits "
                          r"only: a matrix product worked on a torch.float16 tensor"),
    # rank 0's output is right: the bias added on one rank only is named, not a bias missing everywhere
    (bias_on_rank_0_only, r"^rank 1, output\[0, 0, 0\]: got .*\nHint: the bias is missing here, but rank 0's output "
                          r"has it: .*every rank adds the bias to the sum \(once, after the all-reduce\), not one rank "
                          r"only\.$"),
    (reduces_to_rank_0, r"^rank 1, output\[0, 0, 0\]: got .*\nHint: dist\.reduce ran: it delivers the sum to one rank, "
                        r"dst, only.*dist\.all_reduce the partial, then add the bias\.$"),
    (returns_what_all_reduce_returned, r"^rank 0: returns_what_all_reduce_returned returned NoneType None; expected "
                                       r"the full output.*\nHint: dist\.all_reduce works in place and returns None"),
    # right outputs on 2 ranks from all_gathers: judged there, not run on 3, where gloo would abort on uneven pieces
    (column_parallel_instead, r"^rank 0: the output is right, but column_parallel_instead called dist\.all_gather, "
                              r"dist\.all_gather; .* It gathered what the other ranks hold"),
    (first_block_or_the_second, r"^rank 0, output\[0, 0, 0\] of nn.Linear\(9, 7\) on 3 ranks: got .*, expected "
                                r".*\.\nOn 2 ranks \(the check's first run\) every rank was right; this is its second "
                                r"run, on 3 ranks: .*\nHint: rank 2 multiplied its x_local by columns 3 to 5 of "
                                r"linear.weight, but its 3 input features are columns 6 to 8"),
]


def functional_all_reduce(x_local, linear, rank, world_size):
    """Right too: torch's functional collective (what its warnings about dist.nn point to), not dist.all_reduce."""
    import torch.distributed._functional_collectives as funcol

    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    return funcol.all_reduce(partial, "sum", dist.group.WORLD) + linear.bias


def autograd_all_reduce_imported_inside(x_local, linear, rank, world_size):
    """Right too: torch.distributed.nn's all_reduce, imported inside the answer while the 2-rank group stands (its
    default group is read at import: common.groups_of imports the module before any group, so the 3-rank run does not
    wait on the destroyed 2-rank group)."""
    import torch.distributed.nn.functional as distributed_nn

    partial = x_local @ linear.weight.chunk(world_size, dim=1)[rank].T
    return distributed_nn.all_reduce(partial) + linear.bias


# right answers the solution does not cover, in the same launch
ROW_RIGHT = [shard_from_the_shapes, functional_all_reduce, einsum_with_my_columns, autograd_all_reduce_imported_inside]


@pytest.fixture(scope="module")
def row_results():
    answers = (*(answer for answer, _ in ROW_MISTAKES), *ROW_RIGHT)
    return dict(zip(answers, lesson08.run_row_answers(answers)))


@pytest.mark.parametrize("answer", ROW_RIGHT, ids=[answer.__name__ for answer in ROW_RIGHT])
def test_row_parallel_forward_accepts_right_answers_the_solution_does_not_cover(answer, row_results):
    said = lesson08.judge_row(answer.__name__, row_results[answer])
    assert said.startswith(f"{answer.__name__}: every rank") and said.endswith("nn.Linear(9, 7) on 3 ranks")


@pytest.mark.parametrize("answer, feedback", ROW_MISTAKES, ids=[answer.__name__ for answer, _ in ROW_MISTAKES])
def test_row_parallel_forward_names_wrong_outputs(answer, feedback, row_results):
    with pytest.raises(CheckFailed, match=feedback):
        lesson08.judge_row(answer.__name__, row_results[answer], lesson08._returns_a_call_result(answer, "all_reduce"))


def shard_width_from_out_features(x_local, linear, rank, world_size):
    k = linear.out_features // world_size                # the width of the wrong dimension
    partial = x_local @ linear.weight[:, rank * k:(rank + 1) * k].T
    dist.all_reduce(partial)
    return partial + linear.bias


def weight_read_as_in_by_out(x_local, linear, rank, world_size):
    k = x_local.shape[-1]
    partial = x_local @ linear.weight[rank * k:(rank + 1) * k, :]      # rows, as if the weight were (in, out)
    dist.all_reduce(partial)
    return partial + linear.bias


@pytest.mark.parametrize("answer, feedback", [   # each raises on the ranks, which ends its launch: one launch each
    (rows_instead_of_columns, r"(?s)rank \d: rows_instead_of_columns raised RuntimeError: (mm: )?mat1.*Hint: the "
                              r"weight you multiplied by is 8x3: 3 of the 6 ROWS.*COLUMNS of linear.weight itself "
                              r"\(not of its transpose\), the chunk along dim=1"),
    (not_transposed, r"(?s)rank \d: not_transposed raised RuntimeError.*\(15x4 and 6x4\).*Hint: the shard is right, "
                     r"6x4.*untransposed: nn.Linear computes x @ weight.T"),
    (whole_weight, r"(?s)rank \d: whole_weight raised RuntimeError.*\(15x4 and 8x6\).*Hint: the weight you multiplied "
                   r"by is the whole 6x8 linear.weight"),
    (module_without_forward, r"(?s)rank \d: module_without_forward raised NotImplementedError inside torch: Module "
                             r"\[RowParallelLinear\] is missing the required \"forward\" function"),
    (splits_its_input_again, r"(?s)rank \d: splits_its_input_again raised RuntimeError: .*\(15x2 and 4x6\).*"
                             r"partial = mine @ linear.weight.*Hint: the input you multiplied has 2 features, but "
                             r"x_local already is this rank's part of the input \(4 of the 8 features\): you split it "
                             r"again"),
    (row_stub, r"row_stub is not written yet: it raised NotImplementedError"),
    # the first layer, nn.Linear(8, 6): a shard 6 / 2 = 3 columns wide; a block of the weight's rows, untransposed
    (shard_width_from_out_features, r"(?s)^rank \d: shard_width_from_out_features raised RuntimeError: .*\(15x4 and "
                                    r"3x6\).*Hint: x_local has 4 features, but the shard of linear.weight you "
                                    r"multiplied it by has 3 columns, out_features / world_size \(6 / 2\)"),
    (weight_read_as_in_by_out, r"(?s)^rank 1: weight_read_as_in_by_out raised RuntimeError: .*\(15x4 and 2x8\).*Hint: "
                               r"the matrix you multiplied by has 8 columns, all of linear.weight's input features, "
                               r"and 2 rows: a block of linear.weight's ROWS"),
    (adds_all_reduces_result, r"(?s)^rank \d: adds_all_reduces_result raised TypeError: unsupported operand "
                              r"type\(s\) for \+: 'NoneType' and 'Parameter'.*\nHint: dist\.all_reduce works in place "
                              r"and returns None \(a work to wait on with async_op=True\), not the sum"),
    # right for nn.Linear(8, 6); for nn.Linear(12, 10) x_local has 6 features, the shard 4 (or 8) columns
    (shard_width_written, r"(?s)^rank \d: shard_width_written raised RuntimeError: .*\(15x6 and 4x10\).*while "
                          r"computing a row-parallel nn.Linear\(12, 10\).*Hint: x_local has 6 features here, but the "
                          r"shard of linear.weight you multiplied it by has 4 columns, the width for "
                          r"nn.Linear\(8, 6\)"),
    (shard_halves_written, r"(?s)^rank \d: shard_halves_written raised RuntimeError: .*\(15x6 and [48]x10\).*while "
                           r"computing a row-parallel nn.Linear\(12, 10\).*Hint: x_local has 6 features here, but the "
                           r"shard of linear.weight you multiplied it by has [48] columns"),
    # right on 2 ranks; on 3 (the check's second run) ranks 1 and 2 multiply by all 6 columns after rank 0's
    (shard_halves_from_the_shapes, r"(?s)^rank [12]: shard_halves_from_the_shapes raised RuntimeError: .*\(15x3 and "
                                   r"6x7\)\nwhile computing a row-parallel nn.Linear\(9, 7\) on rank [12] of 3 .*\n"
                                   r"On 2 ranks \(the check's first run\) every rank returned linear\(x\); this is "
                                   r"its second run, on 3 ranks\.\nHint: on rank [12] of 3, x_local has 3 features, "
                                   r"but the shard of linear.weight you multiplied it by has 6 columns: as many as all "
                                   r"the columns after rank 0's \(3 to 8\)"),
    # right on 2 ranks; on 3, rank 2's "other rank" is -1: stopped at once, where torch would wait until the timeout
    (swaps_partials_with_the_other_rank, r"(?s)^rank 2: swaps_partials_with_the_other_rank raised StrayPeer: "
                                         r"dist.isend with peer -1, which is no rank of the 3 .*req = dist.isend\("
                                         r"partial, 1 - rank\).*\nOn 2 ranks \(the check's first run\) every rank "
                                         r"returned linear\(x\); this is its second run, on 3 ranks\.\nHint: a "
                                         r"send/recv exchange between ranks is an all-reduce by hand, which holds for "
                                         r"this pair of ranks only"),
])
def test_row_parallel_forward_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_row_parallel_forward(answer)


def test_an_asynchronous_all_reduce_is_named_where_no_known_sum_fits():
    """Given directly: what an all-reduce not waited for leaves depends on timing (a partial sum, or one the answer
    went on to change), so no launch gives one value for sure."""
    partials = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, -5.0])]
    bias, expected = torch.tensor([0.5, 0.5]), torch.tensor([4.5, -2.5])
    hint = lesson08._row_hint(torch.tensor([1.25, 2.25]), 0, 2, expected, partials, bias, ["all_reduce"], [None, None],
                              1, [("dist.all_reduce with async_op=True", torch.float32)])
    assert hint.startswith("dist.all_reduce with async_op=True returned at once, and its sum is in the tensor only "
                           "once the work it returned has finished: call the work's .wait()"), hint


def test_row_parallel_forward_refuses_a_written_number_of_shards_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson08, "run_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^chunks_into_two splits a tensor into 2, a number written in the code "
                                          r"\(`partial = x_local @ linear.weight.chunk\(2, dim=1\)\[rank\].T`\)\.\n"
                                          r"Hint: split into world_size, the argument"):
        check_row_parallel_forward(chunks_into_two)
    with pytest.raises(CheckFailed, match=r"^width_over_two divides the input features by 2, a number written in the "
                                          r"code \(`width = linear\.in_features // 2`\)\.\nHint: divide by "
                                          r"world_size, the argument: the same function must work for 2 or 64"):
        check_row_parallel_forward(width_over_two)


@pytest.mark.parametrize("calls, places, said", [
    # rank 2 exists only in the run on 3 ranks: an exchange that paired the 2 ranks up leaves it waiting there
    ({"recv"}, {2: "recv"}, r"^the ranks wait in dist.recv: an all-reduce by hand with send/recv, which holds for "
                            r"this pair of ranks only: on 3 ranks \(the check's second run\) rank 2 waits for a peer "
                            r"that never answers\. A row-parallel layer needs no send/recv"),
    ({"send"}, {0: "send", 1: "send"}, r"^the ranks wait in dist.send: an all-reduce by hand with send/recv, where "
                                       r"every send needs a matching recv on its peer\. A row-parallel layer"),
    ({"all_reduce"}, {0: "all_reduce"}, r"^dist.all_reduce completes only when every rank calls it"),
])
def test_row_parallel_forward_says_where_a_hang_with_send_and_recv_waits(calls, places, said):
    """Given directly (`common.timeout_message` passes the stuck places): a real hang costs the check's timeout."""
    assert re.search(said, lesson08._row_hang_hint(calls, places))


def test_row_parallel_forward_stops_a_deadlock():
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s.*Stuck: rank 0 in dist.all_reduce.*"
                                          r"not under `if rank == 0:`"):
        check_row_parallel_forward(only_rank_0_reduces, timeout=2)


# --- CopyToModelParallelRegion ------------------------------------------------------------------

class WroteG(torch.autograd.Function):
    """All-reduce in forward, identity in backward: g instead of f."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ReducesAClone(torch.autograd.Function):
    """All-reduces a copy of the gradient and returns the gradient itself: the sum is dropped."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        dist.all_reduce(grad.clone())
        return grad


class IdentityBoth(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class AveragedBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad / dist.get_world_size()


class ReducesInForwardToo(torch.autograd.Function):
    """Averages x over ranks in forward (a no-op on replicated x, but a wasted collective)."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x / dist.get_world_size()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class BroadcastsInForward(torch.autograd.Function):
    """A needless broadcast in forward (x is already the same on every rank): the result is right, the traffic not."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.broadcast(x, src=0)
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class ReturnsTheCall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return dist.all_reduce(grad.clone())  # all_reduce returns None


class BlankBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        pass                                   # no call at all: the message must not say it returned one


class ScattersInForward(torch.autograd.Function):
    """Splits x over the ranks in forward (Megatron's scatter), which f must not."""

    @staticmethod
    def forward(ctx, x):
        return x.chunk(dist.get_world_size(), dim=-1)[dist.get_rank()].contiguous()

    @staticmethod
    def backward(ctx, grad):
        parts = [torch.empty_like(grad) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, grad.contiguous())
        return torch.cat(parts, dim=-1)


class GathersInBackward(torch.autograd.Function):
    """Gathers every rank's gradient and sums them: the right dL/dx, but no all-reduce."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        parts = [torch.empty_like(grad) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, grad.contiguous())
        return sum(parts)


class ExchangesInBackward(torch.autograd.Function):
    """Swaps gradients with the other rank and adds: the right dL/dx on 2 ranks, an all-reduce by hand."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        other, peer = torch.empty_like(grad), 1 - dist.get_rank()
        sent = dist.isend(grad.contiguous(), peer)
        dist.recv(other, peer)
        sent.wait()
        return grad + other


class SubclassesThePackages(CopyToModelParallelRegion):
    pass


class BackwardCallsThePackages(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return copy_to_model_parallel_region(grad)   # the package's f, not written here


class ReducesTheIncomingGradient(torch.autograd.Function):
    """The right dL/dx, but the gradient autograd passed to backward is all-reduced in place."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        dist.all_reduce(grad)
        return grad


class ReducesInBfloat16(torch.autograd.Function):
    """Sums the gradient in bfloat16 (half the bytes): autograd turns it back into float32, 3 digits right."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.to(torch.bfloat16)
        dist.all_reduce(grad)
        return grad


class ReturnsTheSumInFloat16(torch.autograd.Function):
    """Sums in float32, then returns the sum as float16."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad.half()


class ReducesWithMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.MAX)
        return grad


class ForwardInBfloat16(torch.autograd.Function):
    """Converts x in forward: the check's MLP (float32) cannot take it; no backward runs."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad.float()


class Stub(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError("every rank already holds the whole input: return it unchanged")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("all-reduce a copy and return it")


F_MISTAKES = [   # all run one after the other in one launch of 2 ranks
    (WroteG, r"(?s)rank 0, forward output\[0, 0\]: got .*SUM of x over the ranks: f does not communicate in "
             r"forward"),
    (IdentityBoth, r"(?s)rank 0, dL/dx\[\d+, \d+\]: got .*rank 0's own part of dL/dx.*dist.all_reduce"),
    (ReducesAClone, r"(?s)rank 0, dL/dx.*rank 0's own part of dL/dx: dist.all_reduce ran in backward, but its sum "
                    r"never reached the gradient you returned"),
    (AveragedBackward, r"(?s)rank 0, dL/dx\[\d+, \d+\].*MEAN of the ranks' parts"),
    (ReducesInForwardToo, r"rank 0: forward made 1 dist.all_reduce call"),
    (BroadcastsInForward, r"(?s)rank 0: forward made 1 dist.broadcast call\(s\).*f does not communicate in forward"),
    (ReturnsTheCall, r"(?s)rank 0: x.grad is None after backward.*returns None"),
    (BlankBackward, r"^rank 0: x.grad is None after backward: backward must return the gradient for x\.$"),
    # the check's own code never runs backward on what a scattering forward returned: the learner's mistake is named
    (ScattersInForward, r"(?s)^rank 0: forward returned a tensor of shape \(4, 3\) and dtype torch.float32; expected x "
                        r"itself, a tensor of shape \(4, 6\)\.\nHint: this is the rank's chunk of x: f does not split "
                        r"its input"),
    # the right dL/dx, but backward's collectives are not one all-reduce
    (GathersInBackward, r"(?s)^rank 0: dL/dx is right, but GathersInBackward's backward made 1 dist.all_gather; f's "
                        r"backward sums the gradient over the ranks with one dist.all_reduce. It gathered every "
                        r"rank's gradient"),
    (ExchangesInBackward, r"(?s)^rank 0: dL/dx is right, but ExchangesInBackward's backward made 1 dist.isend, 1 "
                          r"dist.recv; .*an all-reduce by hand"),
    (ReducesTheIncomingGradient, r"(?s)^rank 0: dL/dx is right, but dist.all_reduce changed the incoming gradient "
                                 r"in place.*\nHint: all-reduce a tensor you own, a copy of the gradient "
                                 r"\(\.clone\(\)\)"),
    # a sum right to a few digits: the lower precision it went through is named, not a missing all-reduce
    (ReducesInBfloat16, r"^rank 0, dL/dx\[\d+, \d+\]: got .*\nHint: dL/dx is the sum over the ranks to a few digits "
                        r"only: dist.all_reduce worked on a torch.bfloat16 tensor .*autograd turned the gradient back "
                        r"into x's dtype, torch.float32"),
    (ReturnsTheSumInFloat16, r"(?s)^rank 0, dL/dx.*\nHint: dL/dx is the sum over the ranks to a few digits only: every "
                             r"element of it is a torch.float16 number, so it went through torch.float16"),
    (ReducesWithMax, r"(?s)^rank 0, dL/dx.*\nHint: this is the element-wise MAX of the ranks' parts of dL/dx: the full "
                     r"gradient is their SUM"),
    # the check's MLP never runs on a converted x: the learner's forward is named, not the check's own matmul
    (ForwardInBfloat16, r"^rank 0: forward returned a tensor of shape \(4, 6\) and dtype torch.bfloat16; expected x "
                        r"itself, of dtype torch.float32\.\nHint: f is the identity in forward"),
    # found on the ranks: backward runs there (the class itself is not the package's)
    (BackwardCallsThePackages, r"^BackwardCallsThePackages calls ddp_lab.course.tensor_parallel.communications."
                               r"copy_to_model_parallel_region, the package's own answer"),
]


@pytest.fixture(scope="module")
def f_results():
    answers = tuple(answer for answer, _ in F_MISTAKES)
    return dict(zip(answers, lesson08.run_f_answers(answers)))


@pytest.mark.parametrize("answer, feedback", F_MISTAKES, ids=[answer.__name__ for answer, _ in F_MISTAKES])
def test_f_names_wrong_answers(answer, feedback, f_results):
    with pytest.raises(CheckFailed, match=feedback):
        lesson08.judge_f(answer.__name__, f_results[answer], lesson08.returns_a_call_result(answer))


@pytest.mark.parametrize("answer, feedback", [   # refused before any rank starts
    (Stub, r"Stub is not written yet: it raised NotImplementedError\('every rank already holds"),
    (CopyToModelParallelRegion, r"^CopyToModelParallelRegion is \(or subclasses\) ddp_lab.course.tensor_parallel."
                                r"communications.CopyToModelParallelRegion, the package's own answer"),
    (SubclassesThePackages, r"^SubclassesThePackages is \(or subclasses\) ddp_lab.course.tensor_parallel"),
])
def test_f_refuses_wrong_answers_before_any_rank_starts(answer, feedback, monkeypatch):
    monkeypatch.setattr(lesson08, "run_answers_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=feedback):
        check_copy_to_model_parallel_region(answer)


def test_f_refuses_the_stub_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson08, "run_answers_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^Stub is not written yet: it raised NotImplementedError\('every rank"):
        check_copy_to_model_parallel_region(Stub)


def test_a_wrong_gradient_after_an_all_reduce_is_not_told_to_all_reduce():
    """Given directly: backward all-reduced, and dL/dx is none of the known wrong sums (here the right one plus 1)."""
    expected, _ = lesson08._reference_grads()
    results = [{"forward": lesson08._f_input(), "calls": [], "x_grad": expected + 1, "backward_calls": ["all_reduce"],
                "seen": [("dist.all_reduce", torch.float32)]} for _ in range(2)]
    with pytest.raises(CheckFailed, match=r"^rank 0, dL/dx\[0, 0\]: got .*\nHint: dist.all_reduce ran in backward, "
                                          r"but dL/dx is not the sum of the ranks' gradients"):
        lesson08.judge_f("AddsOne", results)


def test_a_difference_below_the_default_tolerance_is_still_shown():
    """The forward output is compared with atol=1e-6: the element named is one that differs by more than that, in
    enough digits to read differently (the default 1e-5 finds none)."""
    want = torch.zeros(2, 3)
    got = want.clone()
    got[1, 2] = 2e-6
    assert lesson08._mismatch(0, "forward output", got, want, atol=1e-6) == \
        "rank 0, forward output[1, 2]: got 2e-06, expected 0"


def test_f_refuses_the_apply_method():
    with pytest.raises(CheckFailed, match=r"pass the class itself"):
        check_copy_to_model_parallel_region(CopyToModelParallelRegion.apply)
