"""Multi-token prediction (MTP) modules in the planner: DeepSeek-V3's extra layers that predict tokens further ahead.

DeepSeek-V3 (DeepSeek-AI 2024, arXiv:2412.19437, Sec. 2.2) trains `mtp_layers` = D modules after the decoder.
Module k takes the previous depth's hidden state and the embedding of the token k places ahead, normalises
each (RMSNorm), projects their concatenation from 2h to h (its matrix M_k), runs one transformer layer (TRM_k)
and the output head, with a final norm of its own, for a cross-entropy loss of its own. The embedding and the
output head are the main model's, shared. Per module:
    parameters   2 h^2 (M_k) + 3 norms + one transformer layer, of the decoder's last layer's kind (a MoE layer
                 in DeepSeek-V3: its 14B of "MTP module" weights count the shared embedding and head again)
    FLOPs        per token, forward: 2 x 2 h^2 (M_k) + the layer's + the output head's 2 h V
Megatron-Core (`mtp_num_layers`) runs them on the last pipeline stage, which then also holds a copy of the word
embedding when pp > 1 (it looks up the tokens ahead) unless the head already is one (tied embeddings).
The planner counts each module's layer as one more layer of the last stage (pipeline_stages.chunk_layers), so its
memory, compute, experts, all-to-alls and gradient sync are any layer's; this module adds what is not a layer:
the projection and norms, the head's second pass (its GEMM, bytes and vocab-parallel all-reduces) and the
embedding copy. Not modelled: each depth's sequence being k tokens shorter (Megatron-Core rolls the tokens and
keeps s), the norms' bytes (3 h values a token against a layer's hundreds), the sync of the embedding copy's
gradients with the first stage's, the projection's own tensor-parallel collectives (its output gathered, its
input's gradient reduced).

No lesson teaches it; the planner of notebooks/13-plan-your-training-run.ipynb uses this module through
model.Transformer(mtp_layers=...) and `--hf-config` (num_nextn_predict_layers; docs/planner.md).
"""

from __future__ import annotations

LARGEST = 64    # more modules than any model trains (DeepSeek-V3: 1); a typo such as 1000 is refused


def check(model) -> None:
    """Raise ValueError (saying the fix) unless mtp_layers is a whole number of modules, 0 to LARGEST."""
    value = model.mtp_layers
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= LARGEST:
        raise ValueError(f"Transformer.mtp_layers must be an integer from 0 (no multi-token prediction) to "
                         f"{LARGEST}, got {value!r}")


def module_parameters(model) -> int:
    """Parameters of one module beyond its transformer layer: M_k (2h x h) and three norms."""
    return 2 * model.hidden * model.hidden + 3 * model.norm_parameters()


def parameter_change(model) -> int:
    """What the modules add to a model's count beyond their layers (which Transformer.parameters counts as layers)."""
    return model.mtp_layers * module_parameters(model)


def last_stage_parameters(model, strategy) -> int:
    """Parameters one tensor-parallel rank of the last stage holds for the modules beyond their layers: M_k split
    by tp (column-parallel), the norms whole, and with pp > 1 an untied model's word-embedding copy (vocab-parallel).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> shape = Transformer("t", 4, 64, 4, 1000, 32, bias=False, norm="rmsnorm", tied_embeddings=False,
        ...                     mtp_layers=1)
        >>> last_stage_parameters(shape, Strategy(tp=2, pp=2)) == 2 * 64 * 64 // 2 + 3 * 64 + 500 * 64
        True
    """
    if not model.mtp_layers:
        return 0
    own = model.mtp_layers * (2 * model.hidden * model.hidden // strategy.tp + 3 * model.norm_parameters())
    copy = -(-model.vocab // strategy.tp) * model.hidden if strategy.pp > 1 and not model.tied_embeddings else 0
    return own + copy


def projection_flops(model, strategy) -> float:
    """Forward FLOPs of the modules' projections M_k for one micro-batch on one tensor-parallel rank."""
    return model.mtp_layers * 2 * strategy.micro_batch * model.seq_len * 2 * model.hidden * model.hidden / strategy.tp


def text(model) -> str:
    """How a plan's model line names the modules: ', 1 multi-token-prediction module' ('' without)."""
    n = model.mtp_layers
    return f", {n} multi-token-prediction module{'s' if n > 1 else ''}" if n else ""
