"""Streaming DiLoCo: the model cut into P fragments, each synced every H steps, at staggered steps.

Plain DiLoCo sends every parameter at the same step, so its link must carry the whole model at
once: the *peak* bandwidth is that of data parallelism, only rarer. Streaming DiLoCo gives each
fragment its own DiLoCo outer step and offsets fragment p by p·H/P steps, so each sync moves
about 1/P of the model and the peak falls P-fold at the same average traffic (Douillard et al.,
"Streaming DiLoCo with overlapping communication: Towards a Distributed Free Lunch", 2025,
arXiv:2501.18512, Section 2). The paper also overlaps a fragment's sync with the next inner
steps and sends 4-bit values; this module does neither: it counts which fragment syncs when.

Introduced in notebooks/16-communicate-less.ipynb.
"""

from __future__ import annotations

from torch import nn

from ddp_lab.course.communicate_less.diloco import DiLoCo


def fragment_offsets(fragments: int, sync_every: int) -> list[int]:
    """The step (mod H) at which each fragment syncs: p·H/P. H must divide by P.

    Example:
        >>> fragment_offsets(4, 16)
        [0, 4, 8, 12]

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    if fragments < 1 or sync_every % fragments:
        raise ValueError(f"sync_every ({sync_every}) must be a multiple of the fragment count ({fragments}), "
                         "so the fragments' syncs are evenly spaced.")
    return [p * sync_every // fragments for p in range(fragments)]


def fragments_due(step: int, fragments: int, sync_every: int) -> list[int]:
    """Which fragments sync after step `step` (counted from 1): those whose offset equals step mod H.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    return [p for p, offset in enumerate(fragment_offsets(fragments, sync_every)) if step % sync_every == offset]


def split_into_fragments(model: nn.Module, fragments: int) -> list[list[nn.Parameter]]:
    """The model's parameter tensors in order, cut into `fragments` groups of consecutive tensors.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    params = list(model.parameters())
    if not 1 <= fragments <= len(params):
        raise ValueError(f"fragments must be between 1 and the {len(params)} parameter tensors; got {fragments}.")
    bounds = [round(i * len(params) / fragments) for i in range(fragments + 1)]
    return [params[bounds[i]:bounds[i + 1]] for i in range(fragments)]


class StreamingDiLoCo:
    """One DiLoCo outer optimizer per fragment; `after_step(step)` syncs the fragments due.

    Example:
        >>> streaming = StreamingDiLoCo(model, fragments=4, sync_every=16)
        >>> for step in range(1, steps + 1):
        ...     inner_step(model)
        ...     streaming.after_step(step)

    Introduced in notebooks/16-communicate-less.ipynb.
    """

    def __init__(self, model: nn.Module, fragments: int, sync_every: int, **outer):
        fragment_offsets(fragments, sync_every)   # validates H against P before anything is built
        self.fragments = [DiLoCo(params, **outer) for params in split_into_fragments(model, fragments)]
        self.sync_every = sync_every

    def after_step(self, step: int) -> list[int]:
        """Sync the fragments due after `step` (from 1); returns their indices."""
        due = fragments_due(step, len(self.fragments), self.sync_every)
        for p in due:
            self.fragments[p].sync()
        return due
