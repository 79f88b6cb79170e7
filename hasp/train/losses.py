"""The two losses the LoRA trainers add to TRL's ``SFTTrainer``: per-row weighted NLL (sft, rs, opd)
and the policy-gradient loss of GRPO and SAGE, which is the same sum with a signed weight.

Policy gradient, and why not TRL's ``GRPOTrainer``: that trainer generates the completions itself
(in-process or through vLLM, whose weights it syncs), and its experimental ``rollout_func`` returns one
completion per prompt; masking environment text inside a completion is tied to its own tool-call loop
and the model's tool-call format. Our episodes run on llama.cpp from a GGUF conversion of the adapter,
are multi-turn ReAct text, and may have PF rewrites between turns. So each sampled turn becomes one
row: prompt = the messages the policy saw at that turn (earlier replies and every observation:
context, never target), completion = the reply the model generated there. The completion-only loss
then computes, per row i with advantage A_i, ``-A_i · Σ_t log π(o_it)``, summed over the rows of the
update and divided by their generated-token count (token-level normalisation). With one optimizer
step per batch of fresh samples the importance ratio is 1, so this is the on-policy GRPO objective
(clipping never binds); a negative advantage lowers the probability of its reply, which rejection
sampling cannot do. ``beta > 0`` adds the k3 estimate of KL(π‖π_ref) per generated token, π_ref the
recipe's start checkpoint, loaded once beside the policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from trl import SFTTrainer

WEIGHT_COLUMN = "sample_weight"


class _WeightCollator:
    """Wraps TRL's collator: pads as usual, then adds the per-row ``sample_weight`` tensor."""

    def __init__(self, base: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> None:
        self.base = base

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.base(examples)
        if examples and WEIGHT_COLUMN in examples[0]:
            batch[WEIGHT_COLUMN] = torch.tensor([float(e[WEIGHT_COLUMN]) for e in examples], dtype=torch.float32)
        return batch


class WeightedSFTTrainer(SFTTrainer):
    """``SFTTrainer`` whose NLL is weighted per row by a ``sample_weight`` column.

    Training loss = Σ_i w_i Σ_t nll_it / num_items_in_batch — TRL 1.16's own normaliser (label
    tokens across the accumulated micro-batches), so gradient accumulation stays exact. Batches
    without weights, eval, and the non-default loss paths (DFT, label smoothing, custom loss
    functions, MoE aux loss) fall back to ``SFTTrainer.compute_loss``. Logs the unweighted token
    NLL as ``nll`` beside the weighted ``loss``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.data_collator = _WeightCollator(self.data_collator)

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if WEIGHT_COLUMN not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, WEIGHT_COLUMN]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001
        weights = inputs.pop(WEIGHT_COLUMN, None)
        if (weights is None or return_outputs or not model.training or self.compute_loss_func is not None
                or self.label_smoother is not None or self.args.loss_type != "nll" or self.aux_loss_enabled):
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)
        nll = -outputs.log_probs  # (batch, seq-1), zero on ignored positions
        mask = outputs.label_mask
        w = weights.to(device=nll.device, dtype=nll.dtype).view(-1, 1)
        num_tokens = mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = (nll * w).sum() / torch.as_tensor(num_tokens, device=nll.device).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())
        # the metrics SFTTrainer logs, computed the same way
        num_valid = self.accelerator.gather_for_metrics(mask.sum()).sum()
        ent = self.accelerator.gather_for_metrics(outputs.entropy.detach().sum()).sum()
        top1 = self.accelerator.gather_for_metrics(outputs.is_top1.sum()).sum()
        nll_sum = self.accelerator.gather_for_metrics(nll.detach().sum()).sum()
        ok = num_valid > 0
        self._metrics["train"]["entropy"].append((ent / num_valid).item() if ok else 0.0)
        self._metrics["train"]["mean_token_accuracy"].append((top1 / num_valid).item() if ok else 0.0)
        self._metrics["train"]["nll"].append((nll_sum / num_valid).item() if ok else 0.0)
        self._metrics["train"]["mean_sample_weight"].append(float(weights.mean()))
        n_in_batch = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
        self._total_train_tokens += n_in_batch // self._tp_size
        self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
        return loss



class PolicyGradientTrainer(WeightedSFTTrainer):
    """``WeightedSFTTrainer`` whose row weight is a signed advantage (see the module docstring)."""

    def __init__(self, *args: Any, beta: float = 0.0, reference: Path | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.beta = float(beta)
        self.reference = None
        if self.beta > 0:
            if reference is None:
                raise ValueError("a KL penalty (beta > 0) needs the reference checkpoint")
            from transformers import AutoModelForCausalLM
            from trl.trainer.utils import add_fused_lm_head

            ref = AutoModelForCausalLM.from_pretrained(reference, dtype=torch.float32)
            ref.eval().requires_grad_(False)
            add_fused_lm_head(ref)
            self.reference = ref

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001
        adv = inputs.pop(WEIGHT_COLUMN, None)
        if adv is None or return_outputs or not model.training:
            return SFTTrainer.compute_loss(self, model, inputs, return_outputs=return_outputs,
                                           num_items_in_batch=num_items_in_batch)
        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)
        logp, mask = outputs.log_probs, outputs.label_mask  # zero on prompt (observation) positions
        n = torch.as_tensor(mask.sum() if num_items_in_batch is None else num_items_in_batch,
                            device=logp.device).clamp(min=1)
        a = adv.to(device=logp.device, dtype=logp.dtype).view(-1, 1)
        pg = -(logp * a * mask).sum() / n
        loss = pg
        kl = torch.zeros((), device=logp.device)
        if self.reference is not None:
            with torch.no_grad():
                ref = self.reference(**inputs, fused_lm_head=True).log_probs
            d = (ref - logp) * mask
            kl = ((torch.exp(d) - d - 1) * mask).sum() / n
            loss = pg + self.beta * kl
        self._metrics["train"]["pg_loss"].append(float(pg.detach()))
        self._metrics["train"]["kl"].append(float(kl.detach()))
        self._metrics["train"]["mean_advantage"].append(float(adv.mean()))
        valid = mask.sum()
        self._metrics["train"]["nll"].append(float((-(logp * mask).sum() / valid.clamp(min=1)).detach()))
        n_in_batch = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
        self._total_train_tokens += n_in_batch // self._tp_size  # what TRL counts as num_tokens
        self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
        return loss
